package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every read of a bucket through a consumer (a watch, History, Keys, ReadAll) runs its own
// push consumer and reads its deliveries on a plain subscription, instead of nats.go's key
// watcher: nats.go takes any delivery with no payload and a "Status: 100" header for a
// heartbeat or flow-control request and skips it, whatever its reply subject. Any client may
// store such a message under a key it writes (an agent its request key), or have the server
// copy it under a key it can read (see Origin): the ordered consumer then saw the next delivery
// as a gap and was re-created from the same message, for ever. Here a stored message is told
// from the server's control messages by its reply subject: only a delivery of a stored message
// has an acknowledgement subject ($JS.ACK...) naming this consumer; heartbeats have none, and
// flow-control requests a $JS.FC one.

// consumerHeartbeat is the consumer's idle heartbeat (nats.go's for ordered consumers): a
// consumer not heard of for two of them is taken for lost (its server restarted, or it was
// deleted) and the read ends.
const consumerHeartbeat = 5 * time.Second

// errConsumerLost ends a consumer whose server no longer answers or delivers in order.
var errConsumerLost = errors.New("the consumer was lost")

// entry is one stored message a consumer delivered: a put, delete or purge of key at rev. A nil
// *entry in a consumer's channel marks that every message pending at its creation was delivered.
type entry struct {
	key   string
	rev   uint64
	value []byte
	op    jetstream.KeyValueOp
	// gapAfter, when not 0, is the stream sequence this consumer delivered before rev, with
	// revisions between them not delivered: deleted (a key's older values past its history),
	// or skipped by the server (see inner.contiguous). The reader checks which.
	gapAfter uint64
}

// consumeOpts says what a consumer delivers.
type consumeOpts struct {
	keys []string // none: every key
	// from: every message from this revision on; 0: the last message of each key (all of
	// them with history).
	from        uint64
	history     bool
	headersOnly bool
}

// inner is one consumer of a bucket's messages, read on a subscription of its own.
type inner struct {
	js      jetstream.JetStream
	nc      *nats.Conn
	stream  string
	prefix  string                 // the bucket's subject prefix, "$KV.<bucket>."
	name    atomic.Pointer[string] // the consumer's, once created
	sub     atomic.Pointer[nats.Subscription]
	updates chan *entry
	// ended is closed once the consumer is stopped, or ends on its own (a gap in its
	// deliveries, its heartbeats missed, an error from the server): err says why then.
	ended   chan struct{}
	endOnce sync.Once
	err     error
	active  atomic.Bool // something was received since the last heartbeat check

	// mu keeps the subscription's handler waiting until the consumer's creation has answered.
	// The handler runs for one message at a time (nats.go calls it from one goroutine per
	// subscription): what follows is its own.
	mu        sync.Mutex
	delivered uint64 // the consumer sequence of the last delivery taken
	pending   uint64 // messages the consumer had for us when created
	received  uint64
	initDone  bool
	// contiguous: the consumer takes every message of the stream (a watch of every key from a
	// revision, or past its snapshot), so the stream sequences it delivers follow one another
	// but for messages deleted meanwhile. A NATS server that caught its copy of the stream up
	// after a quorum loss was seen to go on from a later sequence, the messages between never
	// delivered; the consumer sequence has no gap then. lastStream is the stream sequence of the
	// last delivery (from-1 before the first of a consumer started at from).
	contiguous bool
	from       uint64 // the stream sequence the consumer started at (0: a snapshot first)
	lastStream uint64
}

// consume creates a consumer of the bucket's messages as o says and starts reading it; it fails
// only if the consumer cannot be created.
func (b *Bucket[T]) consume(ctx context.Context, o consumeOpts) (*inner, error) {
	nc := b.js.Conn()
	in := &inner{js: b.js, nc: nc, stream: "KV_" + b.name, prefix: "$KV." + b.name + ".",
		updates: make(chan *entry, 256), ended: make(chan struct{}), contiguous: len(o.keys) == 0 && !o.history, from: o.from}
	if o.from > 0 {
		in.lastStream = o.from - 1
	}
	deliver := nc.NewInbox() // under the connection's own inbox prefix (an agent's)
	in.mu.Lock()
	defer in.mu.Unlock()
	sub, err := nc.Subscribe(deliver, in.handle)
	if err != nil {
		return nil, fmt.Errorf("subscribe for %s's deliveries: %w", b.name, err)
	}
	in.sub.Store(sub)
	// Closed with the connection: the reader learns it at once (and ends, see Watcher.run).
	sub.SetClosedHandler(func(string) { in.end(fmt.Errorf("%w: subscription closed", errConsumerLost)) })
	cfg := jetstream.ConsumerConfig{
		DeliverSubject: deliver,
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:      jetstream.AckNonePolicy,
		MaxDeliver:     1,
		ReplayPolicy:   jetstream.ReplayInstantPolicy,
		FlowControl:    true,
		IdleHeartbeat:  consumerHeartbeat,
		HeadersOnly:    o.headersOnly,
		// Like nats.go's ordered consumers: nothing to keep on disk or replicate, and lost
		// with its server (the heartbeats tell, and the reader starts another).
		MemoryStorage: true,
		Replicas:      1,
	}
	switch {
	case o.from > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.from
	case o.history:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	// One filter subject where it can be: an agent may create only a consumer whose API subject
	// names its key's subject (see busauth).
	switch len(o.keys) {
	case 0:
		cfg.FilterSubject = in.prefix + ">"
	case 1:
		cfg.FilterSubject = in.prefix + o.keys[0]
	default:
		for _, k := range o.keys {
			cfg.FilterSubjects = append(cfg.FilterSubjects, in.prefix+k)
		}
	}
	c, err := b.js.CreatePushConsumer(ctx, in.stream, cfg)
	if err != nil {
		in.end(err)
		return nil, fmt.Errorf("create a consumer of %s: %w", b.name, err)
	}
	info := c.CachedInfo()
	in.name.Store(&info.Name)
	// Some may have been delivered already (the handler waits for mu): they count.
	in.pending = info.NumPending + info.Delivered.Consumer
	if in.pending == 0 {
		in.initDone = true
		in.updates <- nil // the channel is empty: nothing was handed on yet
	}
	time.AfterFunc(2*consumerHeartbeat, in.checkActive)
	return in, nil
}

// handle takes one message from the consumer's subscription.
func (in *inner) handle(m *nats.Msg) {
	in.active.Store(true)
	meta, err := m.Metadata()
	if err != nil {
		in.control(m) // no acknowledgement subject: no stored message
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if name := in.name.Load(); name == nil || meta.Stream != in.stream || meta.Consumer != *name {
		return // not this consumer's delivery
	}
	switch dseq := meta.Sequence.Consumer; {
	case dseq <= in.delivered:
		return // delivered again: taken already
	case dseq != in.delivered+1:
		// Missed (dropped by the client library as a slow consumer's): the reader starts
		// again after the last revision it took.
		in.end(fmt.Errorf("%w: delivery %d after %d", errConsumerLost, dseq, in.delivered))
		return
	}
	in.delivered = meta.Sequence.Consumer
	var gapAfter uint64
	// (The snapshot of a consumer started at 0 gives each key's last value: not contiguous.)
	if in.contiguous && (in.from > 0 || in.initDone) && in.lastStream > 0 && meta.Sequence.Stream > in.lastStream+1 {
		gapAfter = in.lastStream
	}
	in.lastStream = max(in.lastStream, meta.Sequence.Stream)
	// (A subject that names no key of the bucket is passed over: the stream takes none.)
	if strings.HasPrefix(m.Subject, in.prefix) && len(m.Subject) > len(in.prefix) {
		e := &entry{key: m.Subject[len(in.prefix):], rev: meta.Sequence.Stream, value: m.Data, op: operation(m.Header), gapAfter: gapAfter}
		if !in.send(e) {
			return
		}
	}
	if !in.initDone {
		in.received++
		if in.received >= in.pending || meta.NumPending == 0 {
			in.initDone = true
			in.send(nil)
		}
	}
}

// control handles a message of the server's about the consumer: a flow-control request (its
// reply subject waits for an empty message), a heartbeat (which says what was delivered last,
// and may name a flow-control request to answer), or an error status.
func (in *inner) control(m *nats.Msg) {
	switch st := m.Header.Get("Status"); {
	case st == "100" && m.Reply != "":
		_ = in.nc.Publish(m.Reply, nil)
	case st == "100":
		if fc := m.Header.Get("Nats-Consumer-Stalled"); fc != "" {
			_ = in.nc.Publish(fc, nil)
		}
		last, err := strconv.ParseUint(m.Header.Get("Nats-Last-Consumer"), 10, 64)
		if err != nil {
			return
		}
		in.mu.Lock()
		delivered := in.delivered
		in.mu.Unlock()
		if last > delivered {
			in.end(fmt.Errorf("%w: the server delivered up to %d, %d arrived", errConsumerLost, last, delivered))
		}
	case st != "":
		in.end(fmt.Errorf("%w: the server says %s %s", errConsumerLost, st, m.Header.Get("Description")))
	}
}

// send hands e on, unless the consumer ended meanwhile; it reports whether it did.
func (in *inner) send(e *entry) bool {
	select {
	case in.updates <- e:
		return true
	case <-in.ended:
		return false
	}
}

// checkActive ends a consumer not heard of since the last check (two heartbeats). While the
// connection is down it only waits: the watch re-creates its consumer when it is back.
func (in *inner) checkActive() {
	select {
	case <-in.ended:
		return
	default:
	}
	if in.active.Swap(false) || in.nc.Status() != nats.CONNECTED {
		time.AfterFunc(2*consumerHeartbeat, in.checkActive)
		return
	}
	in.end(fmt.Errorf("%w: no heartbeat for %s", errConsumerLost, 2*consumerHeartbeat))
}

// end stops the consumer (err: why, nil when its reader stops it) and deletes it on the server,
// in the background: an ephemeral consumer would otherwise stay until its inactivity threshold.
func (in *inner) end(err error) {
	in.endOnce.Do(func() {
		in.err = err
		close(in.ended)
		if sub := in.sub.Load(); sub != nil {
			_ = sub.Unsubscribe()
		}
		name := in.name.Load()
		if name == nil || in.nc.IsClosed() {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), storedMsgTimeout)
			defer cancel()
			_ = in.js.DeleteConsumer(ctx, in.stream, *name)
		}()
	})
}

// stop ends the consumer; its reader is done with it.
func (in *inner) stop() { in.end(nil) }

// operation reads a stored message's kind from its headers, as nats.go's key watcher does.
func operation(h nats.Header) jetstream.KeyValueOp {
	switch h.Get("KV-Operation") {
	case "DEL":
		return jetstream.KeyValueDelete
	case "PURGE":
		return jetstream.KeyValuePurge
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// readInitial reads a consumer's messages up to the mark that every message pending at its
// creation was delivered, giving each to take; bounded by ctx.
func (b *Bucket[T]) readInitial(ctx context.Context, o consumeOpts, take func(*entry)) error {
	in, err := b.consume(ctx, o)
	if err != nil {
		return err
	}
	defer in.stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-in.updates:
			if e == nil {
				return nil
			}
			take(e)
		case <-in.ended:
			for { // what was handed on before the end still counts
				select {
				case e := <-in.updates:
					if e == nil {
						return nil
					}
					take(e)
				default:
					return fmt.Errorf("read %s: %w", b.name, in.err)
				}
			}
		}
	}
}
