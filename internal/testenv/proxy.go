package testenv

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from a loopback port to a target address until Cut, which
// closes the port and every connection through it: to the client the target has vanished.
// Restore opens the same port again.
type Proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	cut    bool
	// stalled[0]: bytes from the client to the target are dropped; stalled[1]: bytes back.
	// The connections stay open: a one-way partition, which neither side sees until its own
	// keepalive gives up.
	stalled [2]bool
}

// Stall drops the bytes that flow one way (toTarget: from the client to the target; otherwise
// back), on every connection, until Unstall; nothing is closed.
func (p *Proxy) Stall(toTarget bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled[dirIndex(toTarget)] = true
}

// Unstall lets bytes flow both ways again (those dropped meanwhile are lost).
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = [2]bool{}
}

func dirIndex(toTarget bool) int {
	if toTarget {
		return 0
	}
	return 1
}

func (p *Proxy) isStalled(toTarget bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled[dirIndex(toTarget)]
}

// StartProxy listens on 127.0.0.1 and forwards to target; it is cut when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve(l)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.l.Addr().String()
}

// Restore listens on the proxy's port again after Cut: the target is back for new connections.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return nil
	}
	l, err := net.Listen("tcp", p.l.Addr().String())
	if err != nil {
		return err
	}
	p.l, p.cut = l, false
	go p.serve(l)
	return nil
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

// pipe copies src to dst (toTarget: the client's side to the target's), dropping what it reads
// while that direction is stalled.
func (p *Proxy) pipe(dst, src net.Conn, toTarget bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isStalled(toTarget) {
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
}
