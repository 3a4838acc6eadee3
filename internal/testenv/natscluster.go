package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// NATSCluster is a NATS JetStream cluster of nats-server processes on loopback, connected by
// routes, as production runs the bus (deploy/overlays/external-nats). A test kills and restarts
// its servers with SIGKILL, as a power cut or the OOM killer would.
type NATSCluster struct {
	t       testing.TB
	bin     string
	Servers []*NATSServer
}

// NATSServer is one server of a NATSCluster.
type NATSServer struct {
	Name                       string
	Port, ClusterPort, HTTPort int
	dir, conf                  string
	proc                       *Proc
	starts                     int
}

// BuildNATSServer builds nats-server from its Go module (the version go.mod pins) into dir.
func BuildNATSServer(ctx context.Context, dir string) (string, error) {
	return BuildGo(ctx, "github.com/nats-io/nats-server/v2", dir)
}

// StartNATSCluster starts n servers of bin (BuildNATSServer) with JetStream and full-mesh routes,
// each configured with extra (e.g. an authorization block), and waits until every server
// reports JetStream healthy. They are killed when the test ends.
//
// NoAdvertise keeps the servers from telling clients the others' addresses: a client then uses
// only the URLs it was given (each server through a proxy of its own, for instance).
func StartNATSCluster(t testing.TB, bin string, n int, extra string, opts ...NATSClusterOption) *NATSCluster {
	t.Helper()
	var o natsClusterOptions
	for _, opt := range opts {
		opt(&o)
	}
	c := &NATSCluster{t: t, bin: bin}
	for i := range n {
		c.Servers = append(c.Servers, &NATSServer{Name: fmt.Sprintf("nats-%d", i), Port: FreePort(t),
			ClusterPort: FreePort(t), HTTPort: FreePort(t), dir: t.TempDir()})
	}
	for _, s := range c.Servers {
		var routes []string
		for _, o := range c.Servers {
			if o != s {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.ClusterPort))
			}
		}
		conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
jetstream { store_dir: %q }
cluster {
  name: edgedrain-test
  listen: "127.0.0.1:%d"
  routes: [ %s ]
  no_advertise: %v
}
%s
`, s.Name, s.Port, s.HTTPort, filepath.Join(s.dir, "js"), s.ClusterPort, strings.Join(routes, ", "), o.noAdvertise, extra)
		s.conf = filepath.Join(s.dir, "nats.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("write %s's configuration: %v", s.Name, err)
		}
		c.start(s)
	}
	for i := range c.Servers {
		c.WaitHealthy(i, time.Minute)
	}
	return c
}

// NATSClusterOption changes how StartNATSCluster configures its servers.
type NATSClusterOption func(*natsClusterOptions)

type natsClusterOptions struct{ noAdvertise bool }

// NoAdvertise is the servers' cluster no_advertise: clients learn no other server's address.
func NoAdvertise() NATSClusterOption { return func(o *natsClusterOptions) { o.noAdvertise = true } }

// start starts s for the first time and waits until it listens on all its ports. A port taken
// meanwhile (by another test process) is replaced and s started again: no client knows its
// ports yet, and the other servers learn its new route address when it connects to them.
func (c *NATSCluster) start(s *NATSServer) {
	c.t.Helper()
	if err := c.launch(s, true); err != nil {
		c.t.Fatal(err)
	}
}

// launch starts s and waits until it listens on all its ports. With mayMove a port found taken
// is replaced by a free one; without, s is started again on the same ports for up to 30 s: a
// restarted server keeps its ports, since clients and proxies know them (a server that came
// back elsewhere would leave every proxy to it pointing at nothing).
func (c *NATSCluster) launch(s *NATSServer, mayMove bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 0; ; attempt++ {
		s.starts++
		s.proc = StartProc(c.t, s.dir, fmt.Sprintf("%s-%d", s.Name, s.starts), c.bin, nil, "-c", s.conf)
		ready := time.Now().Add(30 * time.Second)
		for !strings.Contains(s.proc.Log(), "Listening for route connections") && !s.proc.Exited() && time.Now().Before(ready) {
			time.Sleep(20 * time.Millisecond)
		}
		log := s.proc.Log()
		switch {
		case strings.Contains(log, "Listening for route connections") && !s.proc.Exited():
			return nil
		case strings.Contains(log, "address already in use") && !mayMove && time.Now().Before(deadline):
			s.proc.Kill()
			time.Sleep(500 * time.Millisecond)
		case strings.Contains(log, "address already in use") && mayMove && attempt < 3:
			s.proc.Kill()
			c.t.Logf("%s: a port was taken; starting it on other ports", s.Name)
			if err := c.move(s); err != nil {
				return err
			}
		default:
			s.proc.Kill()
			return fmt.Errorf("%s did not start:\n%s", s.Name, s.proc.Tail(20))
		}
	}
}

// move gives s new free ports and writes them into its configuration.
func (c *NATSCluster) move(s *NATSServer) error {
	old := []string{fmt.Sprint(s.Port), fmt.Sprint(s.ClusterPort), fmt.Sprint(s.HTTPort)}
	s.Port, s.ClusterPort, s.HTTPort = FreePort(c.t), FreePort(c.t), FreePort(c.t)
	conf, err := os.ReadFile(s.conf)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	text := string(conf)
	for i, p := range []int{s.Port, s.ClusterPort, s.HTTPort} {
		text = strings.ReplaceAll(text, fmt.Sprintf("127.0.0.1:%s\"", old[i]), fmt.Sprintf("127.0.0.1:%d\"", p))
	}
	if err := os.WriteFile(s.conf, []byte(text), 0o600); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// URLs are the client URLs of every server, as clients list them to fail over.
func (c *NATSCluster) URLs() []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", s.Port))
	}
	return out
}

// Kill ends server i with SIGKILL: no goodbye to its routes or clients, files as they were.
func (c *NATSCluster) Kill(i int) {
	c.Servers[i].proc.Kill()
}

// Signal sends sig to server i (SIGSTOP and SIGCONT: a server that hangs, then goes on).
func (c *NATSCluster) Signal(i int, sig syscall.Signal) {
	c.Servers[i].proc.Signal(sig)
}

// Restart starts server i again on its ports and store, after Kill; it fails the test if the
// server does not start.
func (c *NATSCluster) Restart(i int) {
	c.t.Helper()
	if err := c.TryRestart(i); err != nil {
		c.t.Fatal(err)
	}
}

// TryRestart is Restart for a goroutine other than the test's: it returns why the server did
// not start instead of failing the test. The server keeps its ports.
func (c *NATSCluster) TryRestart(i int) error {
	return c.launch(c.Servers[i], false)
}

// Index returns the index of the server named name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, s := range c.Servers {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// Healthy asks server i's monitoring endpoint /healthz, which answers 200 once the server is
// up and its JetStream assets are current with their leaders.
func (c *NATSCluster) Healthy(i int) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", c.Servers[i].HTTPort))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return fmt.Errorf("%s: /healthz %d: %s", c.Servers[i].Name, resp.StatusCode, body.Error)
	}
	return nil
}

// WaitHealthy waits until server i is healthy.
func (c *NATSCluster) WaitHealthy(i int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Healthy(i)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not healthy after %s: %v\n%s", c.Servers[i].Name, timeout, err, c.Servers[i].proc.Tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StreamState is what server i holds of stream (its own copy, leader or follower), from its
// monitoring endpoint /jsz.
func (c *NATSCluster) StreamState(i int, stream string) (StreamCopy, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", c.Servers[i].HTTPort))
	if err != nil {
		return StreamCopy{}, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
				State struct {
					Msgs    uint64 `json:"messages"`
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return StreamCopy{}, fmt.Errorf("%s: /jsz: %w", c.Servers[i].Name, err)
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name == stream {
				return StreamCopy{Leader: s.Cluster.Leader, Msgs: s.State.Msgs, LastSeq: s.State.LastSeq}, nil
			}
		}
	}
	return StreamCopy{}, fmt.Errorf("%s holds no stream %s", c.Servers[i].Name, stream)
}

// ConnectionNames lists the names of the client connections server i has open now and has
// authenticated (one still waiting for its auth callout's answer is left out).
func (c *NATSCluster) ConnectionNames(i int) ([]string, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=4096&auth=true", c.Servers[i].HTTPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var connz struct {
		Conns []struct {
			Name string `json:"name"`
			User string `json:"authorized_user"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&connz); err != nil {
		return nil, fmt.Errorf("%s: /connz: %w", c.Servers[i].Name, err)
	}
	var out []string
	for _, cn := range connz.Conns {
		if cn.User != "" {
			out = append(out, cn.Name)
		}
	}
	return out, nil
}

// StreamCopy is one server's copy of a stream.
type StreamCopy struct {
	Leader        string // the server leading the stream, as this one knows it
	Msgs, LastSeq uint64
}

// Log is what server i wrote since its last start.
func (c *NATSCluster) Log(i int) string { return c.Servers[i].proc.Log() }

// FreePort returns a TCP port free on loopback now, below the kernel's range of ephemeral
// ports: no client connection takes it before the server meant to listen on it does (a server
// restarted by a test keeps its ports), and none handed out by this process is handed out again.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo := ephemeralLow()
	for range 1000 {
		p := 10000 + rand.IntN(lo-10000)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatalf("no free port between 10000 and %d", lo)
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range),
// 32768 if it cannot be read or is too low to leave room below it.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo int
	if _, err := fmt.Sscan(string(data), &lo); err != nil || lo < 15000 {
		// No room below the range (or unreadable): ports from 10000 to 32767 may then be
		// taken by a client's connection; start() tries other ports when one was.
		return 32768
	}
	return lo
}

// StartNATSServer starts one nats-server process of bin named name on a free loopback port, its
// configuration the listen line plus what conf returns for its store directory (e.g. a
// jetstream block with a domain, leafnodes), and returns its client URL once it is ready. It
// is killed when the test ends.
func StartNATSServer(t testing.TB, bin, name string, conf func(storeDir string) string) string {
	t.Helper()
	dir := t.TempDir()
	port := FreePort(t)
	path := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\n%s\n", name, port, conf(filepath.Join(dir, "js")))
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatalf("write %s's configuration: %v", name, err)
	}
	p := StartProc(t, dir, name, bin, nil, "-c", path)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Log(), "Server is ready") {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", name, p.Tail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}
