package pubsub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The headers the server puts on a message it sends as a copy of a stored one (a JetStream
// direct-get reply). No client write carries them.
var copyHeaders = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader}

// The headers nats.go reads a status line into (a reply's "NATS/1.0 404 Message Not Found").
// The server's status replies are no stored message (they carry no Nats-Sequence), and no writer
// of ours puts either header: on a stored message they are a server copy of a status reply (a
// direct get of a missing key aimed at another key stores "404 Message Not Found" there), or a
// client's own header that would make readers take the value for a status reply.
var statusHeaders = []string{"Status", "Description"}

// hasStatus reports whether hdr has a status line or a header named as one.
func hasStatus(hdr nats.Header) bool {
	for _, h := range statusHeaders {
		if len(hdr.Values(h)) > 0 {
			return true
		}
	}
	return false
}

// Origin says who wrote a bucket revision.
type Origin int

// Origins.
const (
	// Written: a client wrote it (or it no longer concerns the key: a resynchronised delete).
	Written Origin = iota
	// Copied: the server wrote it as a copy of another stored message: a client that may read a
	// key can send a direct get whose reply subject names another key of this bucket, and the
	// server writes its reply there, headers and all (a copied delete marker deletes the other
	// key). Copies carry the server's Nats-Stream, Nats-Subject and Nats-Sequence headers;
	// nothing a client writes does.
	Copied
	// Superseded: the revision is gone and key has a newer one, whose own event follows; who
	// wrote it can no longer be told, and it does not matter (the newer value decides).
	Superseded
	// Restored: written with PublishIfRevision(..., restored=true): a value put back by the
	// bucket's administrator, not its key's own writer.
	Restored
)

// RestoredHeader marks a value put back by the bucket's administrator (see Restored).
const RestoredHeader = "Edgedrain-Restored"

// Origin tells who wrote key's value or delete marker at revision rev.
func (b *Bucket[T]) Origin(ctx context.Context, key string, rev uint64) (Origin, error) {
	if rev == 0 {
		return Written, nil
	}
	msg, err := b.storedMsg(ctx, map[string]any{"seq": rev})
	if err != nil {
		return Written, err
	}
	if msg == nil {
		latest, err := b.storedMsg(ctx, map[string]any{"last_by_subj": "$KV." + b.name + "." + key})
		if err != nil {
			return Written, err
		}
		if latest != nil && latest.Seq > rev {
			return Superseded, nil
		}
		return Written, nil
	}
	if msg.Subject != "$KV."+b.name+"."+key {
		return Written, nil
	}
	o, _ := b.originOf(msg.Hdrs)
	return o, nil
}

// originOf tells who wrote a stored message of the bucket from its headers (as stored), which
// it returns decoded (nil: none, or undecodable).
func (b *Bucket[T]) originOf(hdrs []byte) (Origin, nats.Header) {
	if len(hdrs) == 0 {
		if b.mark != "" {
			return Copied, nil // a payload alone: not its writer's (see WriterMark)
		}
		return Written, nil
	}
	hdr, err := nats.DecodeHeadersMsg(hdrs)
	if err != nil {
		return Copied, nil // no client write has headers the client library cannot read back
	}
	for _, h := range copyHeaders {
		if hdr.Get(h) != "" {
			return Copied, hdr
		}
	}
	if hasStatus(hdr) {
		return Copied, hdr
	}
	if b.mark != "" && !isDelete(hdr) && hdr.Get(b.mark) == "" {
		return Copied, hdr
	}
	if hdr.Get(RestoredHeader) != "" {
		return Restored, hdr
	}
	return Written, hdr
}

// GetStored is GetChecked through the stream's message API instead of a direct get: it reads
// key's last stored message as stored (Origin's rules) and needs no direct get, so it answers
// where a direct get does not (direct gets turned off, a server that does not answer them).
// Only a client allowed the stream's message API (the coordinator) may use it.
func (b *Bucket[T]) GetStored(ctx context.Context, key string) (T, uint64, Origin, error) {
	var zero T
	if err := ValidKey(key); err != nil {
		return zero, 0, Written, fmt.Errorf("get %s: %w", b.name, err)
	}
	subj := "$KV." + b.name + "." + key
	msg, err := b.storedMsg(ctx, map[string]any{"last_by_subj": subj})
	switch {
	case err != nil:
		return zero, 0, Written, fmt.Errorf("get %s/%s: %w", b.name, key, err)
	case msg == nil:
		return zero, 0, Written, fmt.Errorf("get %s/%s: %w", b.name, key, ErrNotFound)
	case msg.Subject != subj:
		return zero, msg.Seq, Copied, fmt.Errorf("get %s/%s: the stream answered for subject %q", b.name, key, msg.Subject)
	}
	origin, hdr := b.originOf(msg.Hdrs)
	if hdr != nil && isDelete(hdr) {
		return zero, msg.Seq, origin, fmt.Errorf("get %s/%s: %w", b.name, key, ErrNotFound)
	}
	v, err := b.decode(key, msg.Seq, msg.Data)
	if err != nil {
		return zero, msg.Seq, origin, err
	}
	return v, msg.Seq, origin, nil
}

// storedMsgTimeout bounds one read of a stored message.
const storedMsgTimeout = 2 * time.Second

type storedMsg struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	Hdrs    []byte `json:"hdrs"`
	Data    []byte `json:"data"`
}

// storedMsg reads a message as stored (query: by "seq" or "last_by_subj"), through the stream's
// message API (a direct get, which nats.go prefers for buckets, adds its own headers to the
// reply). Nil: no such message.
func (b *Bucket[T]) storedMsg(ctx context.Context, query map[string]any) (*storedMsg, error) {
	req, err := json.Marshal(query)
	if err != nil {
		return nil, err
	}
	// Bounded: a server whose API queue a client flooded drops requests without an answer.
	ctx, cancel := context.WithTimeout(ctx, storedMsgTimeout)
	defer cancel()
	reply, err := b.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+b.name, req)
	if err != nil {
		return nil, fmt.Errorf("read %s %v: %w", b.name, query, err)
	}
	var resp struct {
		Message *storedMsg          `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("read %s %v: %w", b.name, query, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s %v: %w", b.name, query, resp.Error)
	}
	return resp.Message, nil
}

// PublishIfRevision stores v as key's value only if key's current revision is rev (its value or
// delete marker), and returns the new revision; otherwise it fails with an error wrapping
// ErrConflict. restored marks the value as put back by the administrator (Origin: Restored).
func (b *Bucket[T]) PublishIfRevision(ctx context.Context, key string, v T, rev uint64, restored bool) (uint64, error) {
	data, err := b.encode(key, v)
	if err != nil {
		return 0, err
	}
	msg := b.newMsg(key, data)
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if restored {
		msg.Header.Set(RestoredHeader, "1")
	}
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		if wrongLast(err) {
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return 0, fmt.Errorf("publish %s/%s at revision %d: %w", b.name, key, rev, err)
	}
	return ack.Sequence, nil
}

// Revision is one stored value or delete marker of a key, as History reads it.
type Revision[T any] struct {
	Rev     uint64
	Deleted bool
	// Value is the decoded value of a put; Err is set when it does not decode.
	Value T
	Err   error
}

// History returns key's stored revisions, newest first (as many as the bucket keeps per key).
// It reads them through a consumer (see consume).
func (b *Bucket[T]) History(ctx context.Context, key string) ([]Revision[T], error) {
	if err := ValidKey(key); err != nil {
		return nil, fmt.Errorf("history %s: %w", b.name, err)
	}
	var out []Revision[T]
	err := b.readInitial(ctx, consumeOpts{keys: []string{key}, history: true}, func(e *entry) {
		r := Revision[T]{Rev: e.rev, Deleted: e.op != jetstream.KeyValuePut}
		if !r.Deleted {
			r.Value, r.Err = b.codec.Decode(e.value)
		}
		out = append(out, r)
	})
	if err != nil {
		return nil, fmt.Errorf("history %s/%s: %w", b.name, key, err)
	}
	slices.Reverse(out)
	return out, nil
}

// GetChecked returns key's current value and revision as Get does, and whether that value is a
// server copy of another message (Copied) or a client's write (Written). It reads with one
// direct get, which needs no permission beyond Get's: the server adds its Nats-Stream,
// Nats-Subject and Nats-Sequence headers to a direct get's reply after the stored ones, so a
// stored copy, which already has them, comes back with each twice.
//
// A reply is the stored message exactly when it carries Nats-Sequence: the server's status
// replies (404: no message under key) never do. So the status line is read only from a reply
// without one; a stored message with a Status or Description header is a copy (see
// statusHeaders), never "not found".
func (b *Bucket[T]) GetChecked(ctx context.Context, key string) (T, uint64, Origin, error) {
	var zero T
	if err := ValidKey(key); err != nil {
		return zero, 0, Written, fmt.Errorf("get %s: %w", b.name, err)
	}
	subj, reply, err := b.directGet(ctx, key)
	if err != nil {
		return zero, 0, Written, err
	}
	return b.checked(key, subj, reply)
}

// GetCurrent is GetChecked answered only by a replica of the bucket's stream that has applied
// revision atLeast (the stream's last sequence as its leader told it, LastRevision): a direct
// get, which any replica answers, may be answered by a follower that lags, from what it had
// applied then (an older revision, or not-found); nothing in a single direct get's reply tells
// it. GetCurrent asks for the key's last message as of the answering replica's own last
// sequence (a direct get's multi_last request), whose end-of-batch reply tells that sequence
// (Nats-UpTo-Sequence); a replica behind atLeast, or one that holds nothing under key (it cannot
// tell how far it is), makes it fail with ErrBehind. It needs no stream leader and no consumer,
// but the permission of a direct get of the whole stream ($JS.API.DIRECT.GET.<stream>, the
// request in its body), which an agent does not have: the coordinator's.
func (b *Bucket[T]) GetCurrent(ctx context.Context, key string, atLeast uint64) (T, uint64, Origin, error) {
	var zero T
	if err := ValidKey(key); err != nil {
		return zero, 0, Written, fmt.Errorf("get %s: %w", b.name, err)
	}
	subj := "$KV." + b.name + "." + key
	req, err := json.Marshal(map[string]any{"multi_last": []string{subj}})
	if err != nil {
		return zero, 0, Written, err
	}
	ctx, cancel := context.WithTimeout(ctx, directGetTimeout)
	defer cancel()
	// The stored message (it carries Nats-Sequence), then a status reply: 204 EOB, or 404.
	replies, err := b.replies.requestAll(ctx, "$JS.API.DIRECT.GET.KV_"+b.name, req, func(m *nats.Msg) bool {
		return len(m.Header.Values(jetstream.SequenceHeader)) == 0
	})
	if err != nil {
		return zero, 0, Written, fmt.Errorf("get %s/%s: %w", b.name, key, err)
	}
	end := replies[len(replies)-1]
	switch st := end.Header.Get("Status"); {
	case st == "404":
		return zero, 0, Written, fmt.Errorf("get %s/%s: the replica that answered holds no message under it: %w", b.name, key, ErrBehind)
	case st != "204":
		return zero, 0, Written, fmt.Errorf("get %s/%s: direct get answered %s %s", b.name, key, st, end.Header.Get("Description"))
	case len(replies) != 2:
		return zero, 0, Written, fmt.Errorf("get %s/%s: direct get answered %d messages", b.name, key, len(replies)-1)
	}
	upTo, err := strconv.ParseUint(end.Header.Get(upToSeqHeader), 10, 64)
	if err != nil {
		return zero, 0, Written, fmt.Errorf("get %s/%s: %s %q: %w", b.name, key, upToSeqHeader, end.Header.Get(upToSeqHeader), err)
	}
	if upTo < atLeast {
		return zero, 0, Written, fmt.Errorf("get %s/%s: the replica that answered has applied up to revision %d, not %d: %w", b.name, key, upTo, atLeast, ErrBehind)
	}
	return b.checked(key, subj, replies[0])
}

// upToSeqHeader is the end-of-batch reply's header that tells the sequence a multi_last direct
// get was answered as of (the answering replica's last, unless the request set one).
const upToSeqHeader = "Nats-UpTo-Sequence"

// checked is GetChecked's reading of a direct get's reply for key (its subject subj).
func (b *Bucket[T]) checked(key, subj string, reply *nats.Msg) (T, uint64, Origin, error) {
	var zero T
	hdr := reply.Header
	rev, err := b.storedRevision(key, hdr)
	if err != nil {
		return zero, 0, Written, err
	}
	origin := Written
	for _, h := range copyHeaders {
		if len(hdr.Values(h)) > 1 {
			origin = Copied
		}
	}
	if b.mark != "" && !isDelete(hdr) && len(hdr.Values(b.mark)) != 1 {
		origin = Copied // a payload copied alone (no_hdr), or a message of another writer
	}
	if hasStatus(hdr) {
		origin = Copied // a stored message posing as a status reply (see statusHeaders)
	}
	if subjs := hdr.Values(jetstream.SubjectHeader); len(subjs) == 0 || subjs[len(subjs)-1] != subj {
		return zero, rev, Copied, fmt.Errorf("get %s/%s: the reply is for subject %v", b.name, key, subjs)
	}
	if isDelete(hdr) {
		return zero, rev, origin, fmt.Errorf("get %s/%s: %w", b.name, key, ErrNotFound)
	}
	if origin == Written && hdr.Get(RestoredHeader) != "" {
		origin = Restored
	}
	v, err := b.decode(key, rev, reply.Data)
	if err != nil {
		return zero, rev, origin, err
	}
	return v, rev, origin, nil
}

// directGet asks for key's last message with a direct get (any replica answers), within
// directGetTimeout; subj is the key's subject.
func (b *Bucket[T]) directGet(ctx context.Context, key string) (subj string, reply *nats.Msg, err error) {
	subj = "$KV." + b.name + "." + key
	ctx, cancel := context.WithTimeout(ctx, directGetTimeout)
	defer cancel()
	reply, err = b.replies.request(ctx, "$JS.API.DIRECT.GET.KV_"+b.name+"."+subj, nil)
	if err != nil {
		return subj, nil, fmt.Errorf("get %s/%s: %w", b.name, key, err)
	}
	return subj, reply, nil
}

// storedRevision is the revision of the stored message a direct get's reply for key carries:
// ErrNotFound for the server's 404, an error for any other reply without one.
func (b *Bucket[T]) storedRevision(key string, hdr nats.Header) (uint64, error) {
	seqs := hdr.Values(jetstream.SequenceHeader)
	if len(seqs) == 0 {
		switch st := hdr.Get("Status"); {
		case st == "404":
			return 0, fmt.Errorf("get %s/%s: %w", b.name, key, ErrNotFound)
		case st != "":
			return 0, fmt.Errorf("get %s/%s: direct get answered %s %s", b.name, key, st, hdr.Get("Description"))
		}
		return 0, fmt.Errorf("get %s/%s: the reply has no %s header", b.name, key, jetstream.SequenceHeader)
	}
	// The server's own headers come last: the stored message's revision is the last value.
	rev, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("get %s/%s: revision %q: %w", b.name, key, seqs[len(seqs)-1], err)
	}
	return rev, nil
}

// isDelete reports whether a stored message's headers make it a delete or purge marker.
func isDelete(hdr nats.Header) bool {
	op := hdr.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// directGetTimeout bounds one checked read: a server that drops a request (its API queue full,
// a permission refused) never answers it.
const directGetTimeout = 5 * time.Second

// replyMux receives the replies to a Bucket's direct gets on one subscription of its own. nats.go's
// request functions cannot be used for them: they take a reply with no payload and a
// "Status: 503" header for the server's "no responders" and drop it, and a stored message (the
// reply to a direct get) may carry that header (see statusHeaders).
type replyMux struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string // the subscription's subject, without its last token
	sub     *nats.Subscription
	pending map[string]chan *nats.Msg // by the last token of the reply subject
	many    map[string]bool           // the tokens of requestAll's requests (more than one reply)
	next    uint64
}

// subscribe subscribes for replies once (r.mu held).
func (r *replyMux) subscribe() error {
	if r.sub != nil {
		return nil
	}
	prefix := r.nc.NewInbox() // under the connection's own inbox prefix (an agent's)
	sub, err := r.nc.Subscribe(prefix+".*", r.deliver)
	if err != nil {
		return fmt.Errorf("subscribe for replies: %w", err)
	}
	r.prefix, r.sub, r.pending = prefix, sub, map[string]chan *nats.Msg{}
	return nil
}

// request publishes data to subj and returns the first reply, whatever its headers.
func (r *replyMux) request(ctx context.Context, subj string, data []byte) (*nats.Msg, error) {
	ch, done, err := r.publish(subj, data, 1)
	if err != nil {
		return nil, err
	}
	defer done()
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// publish publishes data to subj with a reply subject of its own, whose replies (up to size
// of them before one is read) come on ch; done forgets the reply subject.
func (r *replyMux) publish(subj string, data []byte, size int) (ch chan *nats.Msg, done func(), err error) {
	r.mu.Lock()
	if err := r.subscribe(); err != nil {
		r.mu.Unlock()
		return nil, nil, err
	}
	r.next++
	token := strconv.FormatUint(r.next, 36)
	ch = make(chan *nats.Msg, size)
	r.pending[token] = ch
	if size > 1 {
		if r.many == nil {
			r.many = map[string]bool{}
		}
		r.many[token] = true
	}
	reply := r.prefix + "." + token
	r.mu.Unlock()
	done = func() {
		r.mu.Lock()
		delete(r.pending, token)
		delete(r.many, token)
		r.mu.Unlock()
	}
	if err := r.nc.PublishRequest(subj, reply, data); err != nil {
		done()
		return nil, nil, err
	}
	return ch, done, nil
}

// requestAll publishes data to subj and returns its replies, in order, up to the first for
// which last is true.
func (r *replyMux) requestAll(ctx context.Context, subj string, data []byte, last func(*nats.Msg) bool) ([]*nats.Msg, error) {
	ch, done, err := r.publish(subj, data, maxReplies)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []*nats.Msg
	for {
		select {
		case m := <-ch:
			out = append(out, m)
			if last(m) {
				return out, nil
			}
			if len(out) == maxReplies {
				return nil, fmt.Errorf("more than %d replies", maxReplies-1)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// maxReplies bounds the replies requestAll takes for one request (its channel's buffer).
const maxReplies = 8

// deliver hands a reply to the request waiting for it; others (late, or unasked) are dropped.
func (r *replyMux) deliver(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	r.mu.Lock()
	ch := r.pending[token]
	if !r.many[token] {
		delete(r.pending, token)
	}
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m: // buffered; a token of request's is handed out once
		default: // (more replies than requestAll takes: it fails on its own)
		}
	}
}
