package testenv

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target address until Cut, which
// closes the port and every connection through it: to the client the target has vanished.
// Restore opens the same port again.
//
// The port is below the kernel's range of ephemeral ports (FreePort): while it is closed, no
// outgoing connection of this or another process is given it as its local port, so Restore
// finds it free. A port from the ephemeral range (":0") could be taken meanwhile, and the
// client would stay cut off for good.
type Proxy struct {
	addr   string // 127.0.0.1:port, the same for the proxy's life
	target string
	mu     sync.Mutex
	resume *sync.Cond // signalled when a stall ends or the proxy is cut (on mu)
	l      net.Listener
	conns  map[net.Conn]struct{}
	cut    bool
	// stalled[0]: bytes from the client to the target are not read; stalled[1]: bytes back.
	// The connections stay open and lose nothing: what the stalled side sends piles up in
	// the kernel's buffers until its writes block, as behind a link that stopped carrying
	// packets. Neither side sees it until its own keepalive gives up (and closes its end).
	stalled [2]bool
	// delay[i]: each chunk read in that direction is held this long before it is passed on, as
	// over a slow link (the same index as stalled).
	delay [2]time.Duration
}

// Delay holds each chunk that flows one way (toTarget as Stall) for d before passing it on, on
// every connection, until set again (0: at once): a server that answers slowly.
func (p *Proxy) Delay(toTarget bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[dirIndex(toTarget)] = d
}

func (p *Proxy) delayOf(toTarget bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay[dirIndex(toTarget)]
}

// Stall stops carrying the bytes that flow one way (toTarget: from the client to the target;
// otherwise back), on every connection, until Unstall; nothing is closed and nothing is lost.
func (p *Proxy) Stall(toTarget bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled[dirIndex(toTarget)] = true
}

// Unstall lets bytes flow both ways again, those held back by the stall first: a TCP stream
// goes on where it stopped, or, if one side gave up meanwhile, ends.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = [2]bool{}
	p.resume.Broadcast()
}

func dirIndex(toTarget bool) int {
	if toTarget {
		return 0
	}
	return 1
}

// waitFlowing waits while the direction is stalled; it reports false once the proxy is cut.
func (p *Proxy) waitFlowing(toTarget bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stalled[dirIndex(toTarget)] && !p.cut {
		p.resume.Wait()
	}
	return !p.cut
}

// StartProxy listens on 127.0.0.1, on a port below the ephemeral range, and forwards to
// target; it is cut when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	var l net.Listener
	var err error
	for range 20 { // FreePort's port may be taken between its check and this listen
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", FreePort(t))); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{l: l, addr: l.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.resume = sync.NewCond(&p.mu)
	go p.serve(l)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Restore listens on the proxy's port again after Cut: the target is back for new connections.
// The port is not in the ephemeral range, so only a process binding it on purpose can hold it;
// Restore tries for a few seconds before it gives up.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.l, p.cut = l, false
			go p.serve(l)
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return fmt.Errorf("restore the proxy on %s: %w", p.addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Cut closes the proxy's port and every connection through it.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	_ = p.l.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.resume.Broadcast()
}

func (p *Proxy) serve(l net.Listener) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		go p.pipe(out, in, true)
		go p.pipe(in, out, false)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

// pipe copies src to dst (toTarget: the client's side to the target's). While that direction
// is stalled it reads nothing: a chunk read just before the stall is held until it ends.
func (p *Proxy) pipe(dst, src net.Conn, toTarget bool) {
	buf := make([]byte, 32<<10)
	for p.waitFlowing(toTarget) {
		n, err := src.Read(buf)
		if n > 0 {
			time.Sleep(p.delayOf(toTarget))
			if !p.waitFlowing(toTarget) {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.untrack(dst, src)
}
