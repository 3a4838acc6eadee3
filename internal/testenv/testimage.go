package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// TestImage is a container image a test built, as an archive a real node imports.
type TestImage struct {
	// Name is its reference on the nodes (repository:tag); pods use it with imagePullPolicy Never.
	Name string
	// Archive is the oci-archive file.
	Archive string
}

// IdleImage is the tests' image for real nodes: one static program (internal/testenv/idle) that
// waits for SIGTERM, and with -listen answers HTTP. It is the pods' sandbox (pause) and the
// workloads' container; every real node has it.
const IdleImage = "edgedrain.test/idle:1"

// buildTestImage builds an image of the program internal/testenv/<program> for this machine's
// platform with hack/tools/image, into dir.
func buildTestImage(ctx context.Context, dir, program string) (TestImage, error) {
	root, err := RepoRoot()
	if err != nil {
		return TestImage{}, err
	}
	bins := filepath.Join(dir, program+"-bin")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o",
		filepath.Join(bins, runtime.GOOS+"_"+runtime.GOARCH, program), "./internal/testenv/"+program)
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return TestImage{}, fmt.Errorf("build the %s image's program: %w\n%s", program, err, out)
	}
	img := TestImage{Name: "edgedrain.test/" + program + ":1", Archive: filepath.Join(dir, program+".tar")}
	assemble := exec.CommandContext(ctx, "go", "run", ".", "--bin-dir", bins, "--platforms", runtime.GOOS+"/"+runtime.GOARCH,
		"--programs", program, "--repo", "edgedrain.test/"+program, "--tag", "1",
		"--out", filepath.Join(dir, program+"-layout"), "--archive", img.Archive)
	assemble.Dir = filepath.Join(root, "hack", "tools", "image")
	if out, err := assemble.CombinedOutput(); err != nil {
		return TestImage{}, fmt.Errorf("assemble the %s image: %w\n%s", program, err, out)
	}
	return img, nil
}
