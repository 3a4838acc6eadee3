package testenv

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyStallsOneWay: bytes the stalled direction carries are dropped while the connection
// stays open; the other direction flows; after Unstall both do.
func TestProxyStallsOneWay(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() { // an echo server that also says "tick" when told "t"
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	p := StartProxy(t, l.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	r := bufio.NewReader(c)
	echo := func(msg string) (string, error) {
		_, err := c.Write([]byte(msg + "\n"))
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		return r.ReadString('\n')
	}
	got, err := echo("a")
	require.NoError(t, err)
	require.Equal(t, "a\n", got)

	p.Stall(true)
	_, err = echo("b")
	require.Error(t, err, "what the client sent passed a stall toward the target")
	p.Unstall()
	got, err = echo("c")
	require.NoError(t, err)
	require.Equal(t, "c\n", got, "the connection did not survive the stall")

	p.Stall(false)
	_, err = echo("d")
	require.Error(t, err, "the answer passed a stall back to the client")
	p.Unstall()
	got, err = echo("e")
	require.NoError(t, err)
	require.Equal(t, "e\n", got)
}
