package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// cgroupHierarchies are the machine's cgroup hierarchies: each v1 controller's directory, or the
// one unified v2 hierarchy.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return dirs
}

// removeCgroups removes the cgroup directories the kubelet and runc made under the node's
// cgroupRoot, in every hierarchy.
func (n *RealNode) removeCgroups() {
	for _, h := range cgroupHierarchies() {
		removeCgroupTree(filepath.Join(h, n.cgroupOf))
	}
}

// removeCgroupTree removes a cgroup directory and those under it, deepest first (a directory
// goes only once empty, and once its processes are gone).
func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = rmdirRetry(dirs[i])
	}
}

// rmdirRetry removes an empty cgroup directory; the kernel may take a moment after its last
// process ended.
func rmdirRetry(dir string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// makeCgroups creates the kubelet's cgroupRoot in every hierarchy: the kubelet refuses one that
// does not exist.
func (n *RealNode) makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(h, n.cgroupOf), 0o755); err != nil {
			return fmt.Errorf("node %s: cgroup %s: %w", n.Name, n.cgroupOf, err)
		}
	}
	return nil
}
