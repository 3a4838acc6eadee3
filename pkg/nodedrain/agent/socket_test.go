package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// shortSocket returns a socket path short enough for sun_path (t.TempDir paths can be too long).
func shortSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ea")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "agent.sock")
}

func TestSocketProtocol(t *testing.T) {
	path := shortSocket(t)
	l, err := listenSocket(path)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan localCall)
	log := logrus.New()
	log.Out = io.Discard
	go serveSocket(ctx, l, calls, log)
	// A stand-in for the agent's loop.
	go func() {
		for c := range calls {
			switch {
			case c.req.Command == CmdStatus:
				c.reply <- SocketReply{OK: true, Status: &StatusReport{Node: "edge-1", Status: nodedrain.StatusCordoned}}
			case c.req.Operation == OpUpdate:
				c.reply <- SocketReply{OK: true, Message: "update deferred: " + c.req.Context}
			default:
				c.reply <- SocketReply{Error: "an update is already deferred"}
			}
		}
	}()

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "only root may ask")

	msg, err := Request(ctx, path, OpUpdate, "v1.2.3")
	require.NoError(t, err)
	assert.Equal(t, "update deferred: v1.2.3", msg)

	_, err = Request(ctx, path, OpReboot, "")
	assert.True(t, errors.Is(err, ErrRefused))
	assert.ErrorContains(t, err, "already deferred")

	_, err = Request(ctx, path, OpUpdate, strings.Repeat("x", nodedrain.MaxContextLen+1))
	assert.ErrorContains(t, err, "longer than the limit")

	st, err := QueryStatus(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, nodedrain.StatusCordoned, st.Status)

	raw := func(line string) string {
		c, err := net.Dial("unix", path)
		require.NoError(t, err)
		defer c.Close()
		_, _ = c.Write([]byte(line))
		if uc, ok := c.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		data, err := io.ReadAll(c)
		require.NoError(t, err)
		return string(data)
	}
	assert.Contains(t, raw("hello\n"), "malformed request")
	assert.Contains(t, raw(`{"command":"reboot"}`+"\n"), `unknown command \"reboot\"`)
	assert.Contains(t, raw(`{"command":"request","operation":"dance"}`+"\n"), "unknown operation")
	assert.Contains(t, raw(`{"command":"status","extra":1}`+"\n"), "unknown field")
	assert.Contains(t, raw(""), "empty request")
	assert.Contains(t, raw(strings.Repeat("x", maxSocketLine+10)), "longer than")
	assert.Contains(t, raw(`{"command":"status"}`), `"ok":true`, "a request without a newline is fine")

	// A second agent must not take the socket of a live one; a stale one is replaced.
	_, err = listenSocket(path)
	assert.ErrorContains(t, err, "another agent is serving it")
	cancel()
	require.Eventually(t, func() bool {
		_, err := net.Dial("unix", path)
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	l2, err := listenSocket(path)
	require.NoError(t, err)
	_ = l2.Close()
}

func TestSocketUnreachable(t *testing.T) {
	_, err := QueryStatus(context.Background(), filepath.Join(t.TempDir(), "none.sock"))
	assert.True(t, errors.Is(err, ErrAgentUnreachable))
	assert.ErrorContains(t, err, "is it running?")

	notSocket := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notSocket, nil, 0o600))
	_, err = listenSocket(notSocket)
	assert.ErrorContains(t, err, "not a socket")
}
