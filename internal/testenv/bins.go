package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot returns the root of the edgedrain checkout that holds the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/edgedrain/edgedrain\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the edgedrain checkout (no go.mod of github.com/edgedrain/edgedrain above the working directory)")
		}
		dir = parent
	}
}

// BuildClusterBinaries runs hack/cluster-bins.sh (with args, e.g. --real-node), which builds the pinned cluster binaries on first
// use (about 10 minutes; progress on stderr) and returns the cache directory holding them.
func BuildClusterBinaries(ctx context.Context, args ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "cluster-bins.sh")}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build cluster binaries (hack/cluster-bins.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
