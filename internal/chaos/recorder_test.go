package chaos

import (
	"context"
	"encoding/json"
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
// any revision it skips (seen once after a stream leader's pause) is read back by sequence from
// the stream's leader. So is every revision the stream holds that the consumer has not delivered
// yet, a few times a second: while the consumer is being re-created (seconds, after its server's
// death) a key may be written more times than its bucket keeps (the status bucket keeps 8 values
// per key), and its older values are dropped before the consumer could deliver them. A revision
// gone all the same is recorded as lost.
type streamRecorder struct {
	w        *world
	stream   jetstream.Stream
	nc       *nats.Conn
	bucket   string
	kind     Kind
	mu       sync.Mutex
	next     uint64 // the first revision not recorded (nor taken for lost, nor a gap) yet
	seen     map[uint64]bool
	readBack int // revisions read back by sequence (ahead of the consumer, or skipped by it)
	skips    int // sequences that never held a message (see skipped)
}

func (w *world) recordStream(ctx context.Context, js jetstream.JetStream, bucket string, kind Kind) *streamRecorder {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	must(w.t, err)
	r := &streamRecorder{w: w, stream: stream, nc: js.Conn(), bucket: bucket, kind: kind, next: 1, seen: map[uint64]bool{}}
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
		// Not final: a revision JetStream cannot serve just now stays for the poller and the end
		// to read back, instead of this delivery holding the lock (and the poller) for the
		// half-minute of a final read's retries while the key's later values push it out.
		r.fill(ctx, md.Sequence.Stream-1, false)
		r.record(md.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data(), md.Timestamp)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errs.Add(1) <= 20 {
			w.logf("recorder of %s: %v", bucket, err)
		}
	}))
	must(w.t, err)
	go func() { <-ctx.Done(); cc.Stop() }()
	go r.poll(ctx)
	return r
}

// pollEvery is how often the recorder reads back what the stream holds and its consumer has not
// delivered: well within the time a key takes to be written 8 times.
const pollEvery = 200 * time.Millisecond

// poll reads back, every pollEvery until ctx ends, the revisions up to the stream's last.
func (r *streamRecorder) poll(ctx context.Context) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := r.stream.Info(ictx)
		cancel()
		if err != nil {
			continue // (the consumer's errors say why; the next poll tries again)
		}
		r.mu.Lock()
		r.fill(ctx, info.State.LastSeq, false)
		r.mu.Unlock()
	}
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
	r.fill(ctx, info.State.LastSeq, true)
	if r.readBack > 0 {
		r.w.logf("recorder of %s: %d revisions were read back by sequence (ahead of its consumer, or skipped by it)", r.bucket, r.readBack)
	}
	if r.skips > 0 {
		r.w.logf("recorder of %s: %d sequences held no message (skipped by a new stream leader)", r.bucket, r.skips)
	}
}

// fill reads back the revisions from r.next to last not recorded yet (r.mu held).
//
// The poller's fills are not final (final false): a read that fails other than with "not found"
// (JetStream unavailable while its servers elect leaders) leaves that revision and the ones after
// it to a later fill — the consumer's, before it records past them, or the end's — instead of
// taking them for lost.
func (r *streamRecorder) fill(ctx context.Context, last uint64, final bool) {
	attempts := 1
	if final {
		attempts = 8 // waiting up to about 40 s in all for JetStream to be available again
	}
	for seq := r.next; seq <= last; seq++ {
		if r.seen[seq] {
			continue
		}
		var msg *jetstream.RawStreamMsg
		var err error
		wait := 500 * time.Millisecond
		for i := range attempts {
			if i > 0 && !sleepCtx(ctx, wait) {
				break
			}
			wait = min(2*wait, 8*time.Second)
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			msg, err = leaderGet(gctx, r.nc, r.stream.CachedInfo().Config.Name, seq)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
		}
		if err != nil && !final && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if skipped, serr := r.skipped(ctx, seq); serr != nil && !final {
				return // (the stream's state could not be read just now: decided later)
			} else if serr != nil {
				err = fmt.Errorf("%w; and deciding whether it ever held a message: %w", err, serr)
			} else if skipped {
				r.mark(seq)
				r.skips++
				r.w.add(Event{Kind: KindPhase, What: "gap", Detail: fmt.Sprintf("%s sequence %d held no message", r.bucket, seq)})
				continue
			}
		}
		if err != nil {
			r.mark(seq)
			r.w.add(Event{Kind: KindPhase, What: "lost", Detail: fmt.Sprintf("%s revision %d: %v", r.bucket, seq, err)})
			continue
		}
		r.readBack++
		r.record(msg.Sequence, msg.Subject, msg.Header, msg.Data, msg.Time)
	}
}

// mark records that seq is decided (recorded, lost or a gap): the next fill starts at the first
// revision not decided yet, so one that could not be read just now is read back later.
func (r *streamRecorder) mark(seq uint64) {
	r.seen[seq] = true
	for r.seen[r.next] {
		r.next++
	}
}

// skipped reports whether sequence seq, which the stream's leader does not have, is taken for a
// gap rather than a lost message. A clustered stream skips sequences (a new stream leader's skip
// entries: seen after a server's restart); a message that was stored goes away only when its key
// passes the bucket's per-key limit (nothing here deletes messages or rolls a key up). So seq
// counts as a gap if no key has dropped a message at or past it: each key below the limit, or
// its oldest kept message older than seq. (Checked after the miss: a key's oldest kept message
// only moves forward.) A lost one is certain; a gap is not: a message the stream acknowledged
// and then lost (a bug of the bus) would look the same here. Gaps are recorded in the history
// and counted in the run's summary, not judged.
func (r *streamRecorder) skipped(ctx context.Context, seq uint64) (bool, error) {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := r.stream.Info(ictx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return false, err
	}
	limit := info.Config.MaxMsgsPerSubject
	if limit <= 0 {
		return true, nil
	}
	for subject, n := range info.State.Subjects {
		if n < uint64(limit) {
			continue
		}
		oldest, err := leaderRequest(ictx, r.nc, info.Config.Name, map[string]any{"seq": 1, "next_by_subj": subject})
		if err != nil {
			return false, fmt.Errorf("oldest message of %s: %w", subject, err)
		}
		if oldest.Sequence > seq {
			return false, nil
		}
	}
	return true, nil
}

// leaderGet reads one message of a stream by sequence from the stream's leader. Not
// Stream.GetMsg: on a bucket's stream (direct gets allowed) that asks any of its replicas, and a
// server just restarted and still catching up answers "message not found" for messages the
// others committed.
func leaderGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return leaderRequest(ctx, nc, stream, map[string]any{"seq": seq})
}

// leaderRequest asks the stream's leader for one message (the JetStream API's message get).
func leaderRequest(ctx context.Context, nc *nats.Conn, stream string, ask map[string]any) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(ask)
	if err != nil {
		return nil, err
	}
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream %s message %v: %w", stream, ask, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("stream %s message %v: an answer with neither message nor error", stream, ask)
	}
	m := resp.Message
	var hdr nats.Header
	if len(m.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return nil, fmt.Errorf("stream %s message %v: headers: %w", stream, ask, err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: hdr, Data: m.Data, Time: m.Time}, nil
}

// record adds one stored message to the history (r.mu held).
func (r *streamRecorder) record(seq uint64, subject string, hdr nats.Header, data []byte, at time.Time) {
	if r.seen[seq] {
		return
	}
	r.mark(seq)
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

// sleepCtx sleeps for d unless ctx ends first; it reports whether it slept the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
