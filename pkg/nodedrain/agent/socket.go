package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// The local protocol: a client connects to the agent's unix socket, writes one JSON object on
// one line (a SocketRequest) and reads one JSON line back (a SocketReply).

// Socket commands.
const (
	// CmdRequest asks for an operation.
	CmdRequest = "request"
	// CmdStatus asks for the node's drain status.
	CmdStatus = "status"
)

// socket limits.
const (
	maxSocketLine  = 16 << 10
	socketDeadline = 10 * time.Second
)

// SocketRequest is what a local client sends.
type SocketRequest struct {
	Command   string    `json:"command"`
	Operation Operation `json:"operation,omitempty"`
	Context   string    `json:"context,omitempty"`
}

// SocketReply is what the agent answers.
type SocketReply struct {
	OK      bool          `json:"ok"`
	Message string        `json:"message,omitempty"`
	Error   string        `json:"error,omitempty"`
	Status  *StatusReport `json:"status,omitempty"`
}

// StatusReport is the node's drain status as the agent sees it.
type StatusReport struct {
	Node string `json:"node"`
	// Status is the status the agent acts on, StatusName its name, Source where it comes from.
	Status     nodedrain.DrainStatus `json:"status"`
	StatusName string                `json:"statusName"`
	Source     Source                `json:"source"`
	Message    string                `json:"message,omitempty"`
	// Bus is the status published for the node (nil: none); BusConnected the connection state.
	Bus          *nodedrain.NodeDrainStatus `json:"bus,omitempty"`
	BusConnected bool                       `json:"busConnected"`
	// Override is the forced status in force, if any.
	Override *nodedrain.StatusOverride `json:"override,omitempty"`
	// State is the agent's operation.
	State State `json:"state"`
}

// localCall is a socket request handed to the agent's loop.
type localCall struct {
	req   SocketRequest
	reply chan SocketReply
}

// listenSocket opens the unix socket at path, replacing a stale one (no agent answering) and
// refusing to take over one a live agent serves. Only the owner (root) may connect.
func listenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("socket %s: another agent is serving it", path)
		}
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// serveSocket answers connections on l until ctx ends, handing each request to calls.
func serveSocket(ctx context.Context, l net.Listener, calls chan<- localCall, log logrus.FieldLogger) {
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil {
				log.WithError(err).Error("local socket stopped accepting")
			}
			return
		}
		go handleConn(ctx, c, calls)
	}
}

func handleConn(ctx context.Context, c net.Conn, calls chan<- localCall) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(socketDeadline))
	reply := answer(ctx, c, calls)
	data, _ := json.Marshal(reply)
	_, _ = c.Write(append(data, '\n'))
	// Read what the client still sends (an over-long request) so that closing does not reset
	// the connection before it has read the answer.
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

func answer(ctx context.Context, c net.Conn, calls chan<- localCall) SocketReply {
	fail := func(format string, args ...any) SocketReply {
		return SocketReply{Error: fmt.Sprintf(format, args...)}
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxSocketLine+1)).ReadBytes('\n')
	switch {
	case len(line) > maxSocketLine:
		return fail("request longer than %d bytes", maxSocketLine)
	case err != nil && !errors.Is(err, io.EOF):
		return fail("read request: %v", err)
	case len(bytes.TrimSpace(line)) == 0:
		return fail("empty request")
	}
	var req SocketRequest
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fail("malformed request: %v", err)
	}
	switch req.Command {
	case CmdStatus:
	case CmdRequest:
		if !req.Operation.Valid() {
			return fail("%v %q (want %s)", ErrUnknownOperation, req.Operation, operationNames)
		}
		if len(req.Context) > nodedrain.MaxContextLen {
			return fail("context is %d bytes, longer than the limit of %d", len(req.Context), nodedrain.MaxContextLen)
		}
	default:
		return fail("unknown command %q (want %s or %s)", req.Command, CmdRequest, CmdStatus)
	}
	call := localCall{req: req, reply: make(chan SocketReply, 1)}
	select {
	case calls <- call:
	case <-ctx.Done():
		return fail("agent is stopping")
	case <-time.After(socketDeadline / 2):
		return fail("agent is busy; try again")
	}
	select {
	case r := <-call.reply:
		return r
	case <-ctx.Done():
		return fail("agent is stopping")
	}
}

// call sends req to the agent on socket and returns its reply.
func call(ctx context.Context, socket string, req SocketRequest) (SocketReply, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return SocketReply{}, fmt.Errorf("%w on %s (is it running? see --socket): %w", ErrAgentUnreachable, socket, err)
	}
	defer c.Close()
	deadline := time.Now().Add(socketDeadline)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	data, err := json.Marshal(req)
	if err != nil {
		return SocketReply{}, err
	}
	if _, err := c.Write(append(data, '\n')); err != nil {
		return SocketReply{}, fmt.Errorf("send to the agent on %s: %w", socket, err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return SocketReply{}, fmt.Errorf("read the agent's answer on %s: %w", socket, err)
	}
	var reply SocketReply
	if err := json.Unmarshal(line, &reply); err != nil {
		return SocketReply{}, fmt.Errorf("the agent's answer on %s: %w", socket, err)
	}
	return reply, nil
}

// Request asks the agent listening on socket for op with the given context, and returns its
// answer. A refusal (another operation pending, no command configured, a context that does not
// fit the operation) matches ErrRefused.
func Request(ctx context.Context, socket string, op Operation, opContext string) (string, error) {
	reply, err := call(ctx, socket, SocketRequest{Command: CmdRequest, Operation: op, Context: opContext})
	if err != nil {
		return "", err
	}
	if !reply.OK {
		return "", fmt.Errorf("%w: %s", ErrRefused, reply.Error)
	}
	return reply.Message, nil
}

// QueryStatus asks the agent listening on socket for its node's drain status.
func QueryStatus(ctx context.Context, socket string) (StatusReport, error) {
	reply, err := call(ctx, socket, SocketRequest{Command: CmdStatus})
	if err != nil {
		return StatusReport{}, err
	}
	if !reply.OK || reply.Status == nil {
		return StatusReport{}, fmt.Errorf("%w: %s", ErrRefused, reply.Error)
	}
	return *reply.Status, nil
}
