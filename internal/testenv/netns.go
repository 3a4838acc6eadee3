package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// NetNS is a network namespace a test created (ip netns add): real nodes, their pods and the
// cluster's network services live in it, so that nothing of theirs touches the machine's own
// network. It is reached from the test process only through what it listens on in it (Listen).
type NetNS struct {
	Name string
	// Path is its handle, for nsenter --net and setns.
	Path string
}

// NewNetNS creates a network namespace with its loopback up.
func NewNetNS(ctx context.Context, name string) (*NetNS, error) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	ns := &NetNS{Name: name, Path: filepath.Join("/run/netns", name)}
	if err := ns.IP(ctx, "link", "set", "lo", "up"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// IP runs ip -n NAME with args.
func (ns *NetNS) IP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %w: %s", ns.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command returns a command that runs name in the namespace. nsenter --net changes only the
// network namespace: ip netns exec would also mount a /sys of the namespace's, which hides the
// cgroup hierarchies from a kubelet.
func (ns *NetNS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + ns.Path, "--", name}, args...)...)
}

// Listen listens on a TCP address inside the namespace. The socket stays in the namespace once
// made, whichever thread accepts on it: only its creation runs on a thread moved into the
// namespace (and back).
func (ns *NetNS) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := ns.do(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// do runs f on an OS thread that is in the namespace for f's length. A thread that cannot be
// moved back stays locked, and Go ends it with the goroutine rather than reuse it.
func (ns *NetNS) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		target, err := os.Open(ns.Path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", ns.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave %s: %w", ns.Name, err)) // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Delete removes the namespace; interfaces in it go with it.
func (ns *NetNS) Delete() error {
	out, err := exec.Command("ip", "netns", "delete", ns.Name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns delete %s: %w: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
