package sim

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

// The model bus: JetStream key-value buckets as edgedrain uses them. Every put or delete gets
// the next sequence number of the stream; each key keeps its last `history` revisions. A
// watcher delivers the current value of every key (its snapshot), a marker, then every revision
// after the last one it delivered, in order, each after a lag; while its connection is down it
// delivers nothing, and on reconnect it replays the revisions it had not delivered that are
// still kept (as pkg/pubsub's Watcher does after re-creating its consumer).

var (
	errBusDown    = errors.New("nats: no servers available (simulated outage)")
	errBusTimeout = errors.New("nats: timeout (simulated lost reply)")
)

// revision is one put (val != nil) or delete (val == nil) of a key.
type revision struct {
	seq uint64
	at  time.Time
	val any
	by  string
	// copied: the server wrote it as a copy of another stored message (what the real bus tells
	// by the copy headers, and the agent's guard and the coordinator see). forged: no
	// coordinator wrote it (a copy, or a forger's or an old tool's value) — the checkers' truth,
	// which no process sees.
	copied, forged bool
}

type bucket struct {
	name    string
	history int
	keys    map[string][]revision
	last    uint64 // the stream's last sequence: of the bucket's last write, to any key
	// genuine is each key's last revision that was not forged, kept whatever the history
	// (what the checkers take for the node's status: see Sim.statusOf).
	genuine map[string]revision
	// log is every write, in order: what a lagging follower has applied (replicas.go).
	log []keyRev
}

type bus struct {
	w        *world
	up       bool
	seq      uint64
	buckets  map[string]*bucket
	watchers []*watcher
	// lossy makes some operations fail or lose their reply (a fault).
	lossy bool
	// onWrite sees every write as it lands (the forger's eyes).
	onWrite func(bucket, key string, r revision)
	// rep is the state of the streams' replicas (replicas.go).
	rep replicas
}

// conn is one client's connection; it is connected while its process runs, its network is up
// and the bus is up.
type conn struct {
	b     *bus
	name  string
	alive bool
	cut   bool // the client's own network is cut (a fault)
	// next is when this client's next operation may reach the server: a client (the agent's
	// bus goroutine) performs its operations one at a time, in order.
	next time.Time
}

func (c *conn) connected() bool { return c.alive && !c.cut && c.b.up }

func newBus(w *world) *bus {
	return &bus{w: w, up: true, rep: replicas{lag: map[string]uint64{}}, buckets: map[string]*bucket{
		bucketRequests: {name: bucketRequests, history: 1, keys: map[string][]revision{}, genuine: map[string]revision{}},
		bucketStatus:   {name: bucketStatus, history: 8, keys: map[string][]revision{}, genuine: map[string]revision{}},
	}}
}

const (
	bucketRequests = "requests"
	bucketStatus   = "status"
)

// latest returns the key's last revision.
func (b *bus) latest(bucket, key string) (revision, bool) {
	revs := b.buckets[bucket].keys[key]
	if len(revs) == 0 {
		return revision{}, false
	}
	return revs[len(revs)-1], true
}

// value returns the key's current value, nil when unset or deleted.
func (b *bus) value(bucket, key string) any {
	r, ok := b.latest(bucket, key)
	if !ok {
		return nil
	}
	return r.val
}

// write applies a put or delete now and wakes the watchers.
func (b *bus) write(bucket, key string, val any, by string) uint64 {
	return b.put(bucket, key, revision{val: val, by: by})
}

// put stores r (its sequence and time set now) as key's newest revision and wakes the watchers.
func (b *bus) put(bucket, key string, r revision) uint64 {
	b.seq++
	r.seq, r.at = b.seq, b.w.now
	bk := b.buckets[bucket]
	revs := append(bk.keys[key], r)
	if len(revs) > bk.history {
		revs = revs[len(revs)-bk.history:]
	}
	bk.keys[key] = revs
	bk.last = b.seq
	bk.log = append(bk.log, keyRev{key: key, r: r})
	if !r.forged {
		bk.genuine[key] = r
	}
	if b.onWrite != nil {
		b.onWrite(bucket, key, r)
	}
	for _, wt := range b.watchers {
		if wt.bucket == bucket {
			wt.pump()
		}
	}
	return b.seq
}

// op performs a client operation that takes time: apply runs on the server (if the client is
// connected when the request arrives), reply runs back at the client. Under a lossy bus an
// operation may fail before it is applied, or be applied and answered with a timeout.
func (b *bus) op(c *conn, apply func() error, reply func(error)) {
	at := b.w.now.Add(b.w.between(time.Millisecond, 20*time.Millisecond))
	if at.Before(c.next) {
		at = c.next
	}
	c.next = at.Add(time.Nanosecond)
	b.w.at(at, "bus request", func() {
		if !c.connected() {
			b.w.after(b.w.between(0, 2*time.Second), "bus error", func() { reply(errBusDown) })
			return
		}
		if b.lossy && b.w.chance(0.1) || b.writeFails() {
			b.w.after(b.w.between(0, time.Second), "bus error", func() { reply(errBusTimeout) })
			return
		}
		err := apply()
		lost := b.lossy && b.w.chance(0.15) || b.ackLost()
		b.w.after(b.w.between(time.Millisecond, 20*time.Millisecond), "bus reply", func() {
			if lost && err == nil {
				err = errBusTimeout
			}
			reply(err)
		})
	})
}

// watcher is one watch of a bucket, optionally filtered to one key.
type watcher struct {
	b       *bus
	c       *conn
	bucket  string
	key     string // "" for every key
	pos     uint64 // the last sequence delivered
	busy    bool   // a delivery is scheduled
	stopped bool
	// slow makes deliveries lag by seconds (a fault).
	slow bool
	// rng draws the lags (nil: the world's).
	rng *rand.Rand
	// deliver receives each revision; snapshotDone is called once after the snapshot.
	deliver      func(key string, r revision)
	snapshotDone func()
}

// watch starts a watcher: the snapshot of current values, the marker, then every change.
func (b *bus) watch(c *conn, bucket, key string, deliver func(string, revision), snapshotDone func()) *watcher {
	return b.watchWith(nil, c, bucket, key, deliver, snapshotDone)
}

// watchWith is watch drawing its lags from rng (nil: the world's).
func (b *bus) watchWith(rng *rand.Rand, c *conn, bucket, key string, deliver func(string, revision), snapshotDone func()) *watcher {
	wt := &watcher{b: b, c: c, bucket: bucket, key: key, deliver: deliver, snapshotDone: snapshotDone, rng: rng}
	b.watchers = append(b.watchers, wt)
	b.create(wt)
	return wt
}

// create creates the watch's consumer: its snapshot is what the server holds then. While the
// JetStream API refuses consumers (replicas.go) the watcher tries again every second or two.
func (b *bus) create(wt *watcher) {
	bucket, key := wt.bucket, wt.key
	if b.consumersRefused() {
		wt.busy = true
		b.w.after(betweenR(b.rep.rng, time.Second, 2*time.Second), "watch consumer retry", func() {
			wt.busy = false
			if !wt.stopped {
				b.create(wt)
			}
		})
		return
	}
	// The snapshot is what the server holds when the watch is created.
	var snap []struct {
		key string
		r   revision
	}
	for _, k := range slices.Sorted(maps.Keys(b.buckets[bucket].keys)) {
		if key != "" && k != key {
			continue
		}
		r, _ := b.latest(bucket, k)
		if r.val != nil {
			snap = append(snap, struct {
				key string
				r   revision
			}{k, r})
		}
	}
	wt.pos = b.seq
	wt.busy = true
	delay := wt.between(time.Millisecond, 30*time.Millisecond)
	b.w.after(delay, "watch snapshot", func() {
		wt.busy = false
		if wt.stopped {
			return
		}
		for _, s := range snap {
			wt.deliver(s.key, s.r)
		}
		wt.snapshotDone()
		wt.pump()
	})
}

func (wt *watcher) stop() { wt.stopped = true }

func (wt *watcher) between(lo, hi time.Duration) time.Duration {
	if wt.rng != nil {
		return betweenR(wt.rng, lo, hi)
	}
	return wt.b.w.between(lo, hi)
}

// pump schedules the delivery of the next revision the watcher has not delivered.
func (wt *watcher) pump() {
	if wt.busy || wt.stopped || !wt.c.connected() || wt.b.consumersRefused() {
		return
	}
	if _, _, ok := wt.next(); !ok {
		return
	}
	lag := wt.between(time.Millisecond, 40*time.Millisecond)
	if wt.slow {
		lag = wt.between(time.Second, 15*time.Second)
	}
	wt.busy = true
	wt.b.w.after(lag, "watch delivery", func() {
		wt.busy = false
		if wt.stopped {
			return
		}
		if !wt.c.connected() || wt.b.consumersRefused() {
			return // not delivered; replayed on reconnect (its consumer re-created)
		}
		// The revision may have been dropped from history meanwhile: take what is kept now.
		key2, r, ok := wt.next()
		if !ok {
			return
		}
		wt.pos = r.seq
		wt.deliver(key2, r)
		wt.pump()
	})
}

// next returns the kept revision with the lowest sequence after pos.
func (wt *watcher) next() (string, revision, bool) {
	var bestKey string
	var best revision
	found := false
	for k, revs := range wt.b.buckets[wt.bucket].keys {
		if wt.key != "" && k != wt.key {
			continue
		}
		for _, r := range revs {
			if r.seq > wt.pos && (!found || r.seq < best.seq) {
				best, bestKey, found = r, k, true
			}
		}
	}
	return bestKey, best, found
}

// reconnected wakes every watcher (after an outage or a client's network coming back).
func (b *bus) reconnected() {
	for _, wt := range b.watchers {
		wt.pump()
	}
}
