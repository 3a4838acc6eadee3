package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The machine's directories a real node binds its own over, which may not exist on the machine
// (/persist, the agent's forced-status directory's parent). Several test processes may run real
// nodes at once: each holds a shared lock for its clusters' lifetime, and the last one out
// removes a mount point the tests made (the marker file says so), never one the machine had.
const (
	mountPointsLock   = "/run/lock/edgedrain-real-nodes"
	mountPointsMarker = "/run/lock/edgedrain-made-persist"
)

// nodeMountPoints are those of nodeDirs the machine may lack.
var nodeMountPoints = []string{"/persist"}

// mountPoints is one cluster's hold on the nodes' mount points.
type mountPoints struct{ lock *os.File }

// holdMountPoints makes the mount points that are missing and holds them until release. The
// shared lock comes first: a cluster being released (exclusive) cannot remove a mount point
// this one is about to use.
func holdMountPoints() (*mountPoints, error) {
	if err := os.MkdirAll(filepath.Dir(mountPointsLock), 0o755); err != nil {
		return nil, fmt.Errorf("the real nodes' mount points: %w", err)
	}
	f, err := os.OpenFile(mountPointsLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the real nodes' mount points: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("the real nodes' mount points: lock: %w", err)
	}
	for _, p := range nodeMountPoints {
		switch err := os.Mkdir(p, 0o755); {
		case err == nil:
			if err := os.WriteFile(mountPointsMarker, []byte(p+"\n"), 0o600); err != nil {
				_ = f.Close()
				return nil, err
			}
		case !errors.Is(err, os.ErrExist):
			_ = f.Close()
			return nil, fmt.Errorf("the real nodes' mount point %s: %w", p, err)
		}
	}
	return &mountPoints{lock: f}, nil
}

// release lets the mount points go; the last holder removes those the tests made.
func (m *mountPoints) release() {
	if m == nil {
		return
	}
	defer m.lock.Close()
	// The conversion may drop the shared lock before it fails: this cluster is done either way.
	if unix.Flock(int(m.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // another cluster still uses them
	}
	if _, err := os.Stat(mountPointsMarker); err == nil {
		for _, p := range nodeMountPoints {
			_ = os.Remove(p) // only if empty: the nodes' own directories are bound over it, not in it
		}
		_ = os.Remove(mountPointsMarker)
	}
}
