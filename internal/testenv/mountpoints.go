package testenv

import (
	"errors"
	"fmt"
	"os"

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

// holdMountPoints makes the mount points that are missing and holds them until release.
func holdMountPoints() (*mountPoints, error) {
	f, err := os.OpenFile(mountPointsLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the real nodes' mount points: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("the real nodes' mount points: lock: %w", err)
	}
	for _, p := range nodeMountPoints {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.Mkdir(p, 0o755); err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("the real nodes' mount point %s: %w", p, err)
			}
			if err := os.WriteFile(mountPointsMarker, []byte(p+"\n"), 0o600); err != nil {
				_ = f.Close()
				return nil, err
			}
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil { // others may use them too now
		_ = f.Close()
		return nil, fmt.Errorf("the real nodes' mount points: lock: %w", err)
	}
	return &mountPoints{lock: f}, nil
}

// release lets the mount points go; the last holder removes those the tests made.
func (m *mountPoints) release() {
	if m == nil {
		return
	}
	defer m.lock.Close()
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
