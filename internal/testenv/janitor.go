package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A real cluster holds an exclusive lock named after its network namespace for its whole life.
// A test process killed outright (SIGKILL, a CI timeout) takes its nodes' processes with it,
// but not the namespace, its interfaces or the nodes' cgroup directories: the next real cluster
// on the machine finds them by their unheld locks and removes them.
const realClusterLocks = "/run/lock/edgedrain-real-cluster-"

// holdClusterLock takes the lock of the cluster whose namespace is ns; closing it releases it.
func holdClusterLock(ns string) (*os.File, error) { return holdLock(realClusterLocks + ns) }

// holdLock takes the exclusive lock file at path without waiting; closing it releases it.
func holdLock(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// releaseLock removes and releases a live test resource's lock, at its end.
func releaseLock(f *os.File) {
	if f != nil {
		_ = os.Remove(f.Name())
		_ = f.Close()
	}
}

// removeDeadClusters removes what real clusters of killed test processes left: each network
// namespace of ours whose lock nobody holds (or that has no lock: killed before it took it),
// with its nodes' cgroup directories.
func removeDeadClusters() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		ns := e.Name()
		if !strings.HasPrefix(ns, realNetNSPrefix) {
			continue
		}
		f, err := holdClusterLock(ns)
		if err != nil {
			continue // alive: its process holds the lock
		}
		_ = exec.Command("ip", "netns", "delete", ns).Run()
		for _, h := range cgroupHierarchies() {
			dirs, _ := filepath.Glob(filepath.Join(h, ns+"-*"))
			for _, d := range dirs {
				removeCgroupTree(d)
			}
		}
		releaseLock(f)
	}
}
