package testenv

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Deadlines of the reads below: one that should get its bytes has seconds (a loaded machine
// is slow, not wrong); one that should get none waits a little before it says so.
const (
	arrives   = 5 * time.Second
	staysAway = 300 * time.Millisecond
)

// echoServer answers every byte it reads with the same byte.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(arrives))
	_, err := c.Write([]byte(msg + "\n"))
	require.NoError(t, err)
}

func readLine(c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

// TestProxyStallsOneWay: the stalled direction carries nothing while the connection stays
// open; after Unstall what was held back arrives, in order, and the stream goes on.
func TestProxyStallsOneWay(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	send(t, c, "a")
	got, err := readLine(c, r, arrives)
	require.NoError(t, err)
	require.Equal(t, "a\n", got)

	for _, toTarget := range []bool{true, false} {
		p.Stall(toTarget)
		send(t, c, "b")
		_, err = readLine(c, r, staysAway)
		require.Error(t, err, "bytes passed a stall (toward the target: %v)", toTarget)
		send(t, c, "c")
		p.Unstall()
		for _, want := range []string{"b\n", "c\n"} {
			// A read that timed out above may have kept a part of the line: ReadString
			// returns it with its error, and the rest comes with the next call.
			got, err = readLine(c, r, arrives)
			require.NoError(t, err, "the stream did not go on after the stall (toward the target: %v)", toTarget)
			require.Equal(t, want, got, "bytes lost or reordered by the stall (toward the target: %v)", toTarget)
		}
	}
}

// TestProxyStallBuildsBackPressure: a stalled link reads nothing, so the sender's writes block
// once the buffers between are full, as behind a link that carries no packets; nothing written
// is lost when it flows again.
func TestProxyStallBuildsBackPressure(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, _ := dial(t, p.Addr())
	p.Stall(true)
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<20/16) // more than the buffers of both sockets between
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Write(data)
	require.Error(t, err, "a 64 MiB write went through a stalled link")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "the write failed other than by blocking: %v", err)
	require.Positive(t, n)

	p.Unstall()
	echoed := make([]byte, n)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadFull(c, echoed)
	require.NoError(t, err, "what was written before the stall blocked did not all come back")
	require.Equal(t, data[:n], echoed)
}

// TestProxyRestoreKeepsItsPort: Cut refuses connections, Restore accepts them again on the
// same port, time after time; the port is below the ephemeral range, where no client's
// connection can take it while it is closed.
func TestProxyRestoreKeepsItsPort(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	addr := p.Addr()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	if lo := ephemeralLow(); lo > 15000 {
		require.Less(t, n, lo, "the proxy listens in the ephemeral range")
	}
	other := echoServer(t) // dialled while the proxy is cut: connections that take ephemeral ports
	c, r := dial(t, addr)
	for i := range 5 {
		p.Cut()
		_ = c.SetReadDeadline(time.Now().Add(arrives))
		_, err := r.ReadString('\n')
		require.Error(t, err, "a connection survived Cut")
		_, err = net.DialTimeout("tcp", addr, arrives)
		require.Error(t, err, "a cut proxy accepted a connection")
		for range 20 {
			o, err := net.Dial("tcp", other)
			require.NoError(t, err)
			_ = o.Close()
		}
		require.NoError(t, p.Restore(), "restore %d", i)
		require.Equal(t, addr, p.Addr())
		c, r = dial(t, addr)
		send(t, c, "x")
		got, err := readLine(c, r, arrives)
		require.NoError(t, err)
		require.Equal(t, "x\n", got)
	}
}
