package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alive reports whether pid is a live process (a zombie counts as gone).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func pidsOf(cp *ControlPlane) []int {
	pids := make([]int, 0, len(cp.procs))
	for _, p := range cp.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

func TestControlPlaneStopLeavesNoProcess(t *testing.T) {
	RequireCluster(t, cluster)
	cp, err := StartControlPlane(context.Background(), ControlPlaneConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	pids := pidsOf(cp)
	require.Len(t, pids, 5, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
	cp.Stop()
	for _, pid := range pids {
		assert.False(t, alive(pid), "process %d still running after Stop", pid)
	}
}

const childEnv = "EDGEDRAIN_TESTENV_CHILD_DIR"

// TestHelperControlPlaneChild is not a test: TestControlPlaneDiesWithKilledParent runs the test
// binary again with only this function, which starts a control plane, prints its pids and waits to
// be killed.
func TestHelperControlPlaneChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("helper process for TestControlPlaneDiesWithKilledParent")
	}
	cp, err := StartControlPlane(context.Background(), ControlPlaneConfig{Dir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("PIDS", strings.Trim(fmt.Sprint(pidsOf(cp)), "[]"))
	select {}
}

func TestControlPlaneDiesWithKilledParent(t *testing.T) {
	RequireCluster(t, cluster)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperControlPlaneChild$", "-test.short", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var pids []int
	timeout := time.After(2 * time.Minute)
	for pids == nil {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "child exited before starting its control plane")
			require.False(t, strings.HasPrefix(line, "ERROR"), line)
			if rest, ok := strings.CutPrefix(line, "PIDS "); ok {
				for _, f := range strings.Fields(rest) {
					pid, err := strconv.Atoi(f)
					require.NoError(t, err)
					pids = append(pids, pid)
				}
			}
		case <-timeout:
			t.Fatal("child did not start its control plane in time")
		}
	}
	require.Len(t, pids, 5)
	for _, pid := range pids {
		require.True(t, alive(pid), "component %d not running before the kill", pid)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "components outlived their killed parent: %v", pids)
}
