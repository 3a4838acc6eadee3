package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// streamRecorder records every message a bucket's stream stores, with the server's timestamp:
// an ordered consumer (re-created after a server's death, from where it was) delivers them, and
// any revision it skips (seen once after a stream leader's pause) is read back by sequence. A
// revision gone meanwhile (the bucket keeps pubsub.MaxHistory, 64, values per key; an older
// one is dropped) is recorded as lost.
type streamRecorder struct {
	w        *world
	stream   jetstream.Stream
	bucket   string
	kind     Kind
	mu       sync.Mutex
	next     uint64 // the first revision not recorded yet, or skipped
	seen     map[uint64]bool
	readBack int // revisions the consumer skipped, read back by sequence
}

func (w *world) recordStream(ctx context.Context, js jetstream.JetStream, bucket string, kind Kind) *streamRecorder {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	must(w.t, err)
	r := &streamRecorder{w: w, stream: stream, bucket: bucket, kind: kind, next: 1, seen: map[uint64]bool{}}
	cons, err := js.OrderedConsumer(ctx, "KV_"+bucket, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	must(w.t, err)
	var errs atomic.Int64
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fill(ctx, md.Sequence.Stream-1)
		r.record(md.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data(), md.Timestamp)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errs.Add(1) <= 20 {
			w.logf("recorder of %s: %v", bucket, err)
		}
	}))
	must(w.t, err)
	go func() { <-ctx.Done(); cc.Stop() }()
	return r
}

// finish reads back every revision stored and not delivered yet.
func (r *streamRecorder) finish(ctx context.Context) {
	info, err := r.stream.Info(ctx)
	if err != nil {
		r.w.logf("recorder of %s: %v", r.bucket, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fill(ctx, info.State.LastSeq)
	if r.readBack > 0 {
		r.w.logf("recorder of %s: %d revisions its consumer skipped were read back by sequence", r.bucket, r.readBack)
	}
}

// fill reads back the revisions from r.next to last not recorded yet (r.mu held).
func (r *streamRecorder) fill(ctx context.Context, last uint64) {
	for seq := r.next; seq <= last; seq++ {
		if r.seen[seq] {
			continue
		}
		var msg *jetstream.RawStreamMsg
		var err error
		for range 5 {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			msg, err = r.stream.GetMsg(gctx, seq)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
		}
		if err != nil {
			r.seen[seq] = true
			r.w.add(Event{Kind: KindPhase, What: "lost", Detail: fmt.Sprintf("%s revision %d: %v", r.bucket, seq, err)})
			continue
		}
		r.readBack++
		r.record(msg.Sequence, msg.Subject, msg.Header, msg.Data, msg.Time)
	}
}

// record adds one stored message to the history (r.mu held).
func (r *streamRecorder) record(seq uint64, subject string, hdr nats.Header, data []byte, at time.Time) {
	if r.seen[seq] {
		return
	}
	r.seen[seq] = true
	r.next = max(r.next, seq+1)
	e := Event{At: at, Kind: r.kind, Node: strings.TrimPrefix(subject, "$KV."+r.bucket+"."), Rev: seq}
	switch {
	case hdr.Get("KV-Operation") != "":
		e.Deleted = true
	case r.kind == KindStatus && e.Node == nodedrain.TermKey:
		e.Kind, e.Node = KindTerm, ""
		if term, err := (nodedrain.TermCodec{}).Decode(data); err == nil {
			e.Holder = term.Coordinator
		} else {
			e.Detail = "undecodable: " + err.Error()
		}
	case r.kind == KindStatus:
		st, err := nodedrain.DecodeStatus(data)
		if err != nil {
			e.Detail = "undecodable: " + err.Error()
		} else {
			e.Status = &st
			e.RequestID = st.RequestID
		}
		e.Marked = hdr.Get(nodedrain.StatusWriterMark) != ""
	default:
		req, err := nodedrain.DecodeRequest(data)
		if err != nil {
			e.Detail = "undecodable: " + err.Error()
		} else {
			e.RequestID, e.Detail = req.RequestID, req.Context
		}
	}
	r.w.add(e)
}
