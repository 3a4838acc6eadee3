package pubsub_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A client that may read key a makes the server write a copy of a's delete marker under key b
// (a direct get whose reply subject is b's): b is deleted on the bus, and Origin tells the copy
// from a client's own writes.
func TestOriginTellsServerCopiesFromClientWrites(t *testing.T) {
	_, js, b := setup(t, "copies", pubsub.BucketConfig{History: 5})
	ctx := testCtx(t)
	revA := publish(t, b, "a", 1)
	revB := publish(t, b, "b", 2)
	require.NoError(t, b.Unpublish(ctx, "a"))

	nc := js.Conn()
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_copies.$KV.copies.a", "$KV.copies.b", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		_, _, err := b.Get(ctx, "b")
		return err != nil
	}, 5*time.Second, 20*time.Millisecond, "the copied delete marker deleted b")
	copyRev := revB + 2 // a's delete marker, then the copy

	for _, c := range []struct {
		key  string
		rev  uint64
		want pubsub.Origin
	}{{"a", revA, pubsub.Written}, {"b", revB, pubsub.Written}, {"a", revB + 1, pubsub.Written}, {"b", copyRev, pubsub.Copied},
		{"b", 999, pubsub.Written}, {"a", copyRev, pubsub.Written}} {
		got, err := b.Origin(ctx, c.key, c.rev)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%s at revision %d", c.key, c.rev)
	}

	// Putting back the value b had, on condition that the copy is still the latest.
	_, err := b.PublishIfRevision(ctx, "b", record{N: 2, S: "b"}, copyRev-1, true)
	require.ErrorIs(t, err, pubsub.ErrConflict, "a stale revision")
	rev, err := b.PublishIfRevision(ctx, "b", record{N: 2, S: "b"}, copyRev, true)
	require.NoError(t, err)
	o, err := b.Origin(ctx, "b", rev)
	require.NoError(t, err)
	require.Equal(t, pubsub.Restored, o, "a value put back is told from its key's writer's")
	v, got, err := b.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, record{N: 2, S: "b"}, v)
	require.Equal(t, rev, got)
}

// With one value kept per key (the default), a revision overwritten before it is looked at is
// superseded: its writer can no longer be told, and the newer value decides.
func TestOriginOfAnOverwrittenRevision(t *testing.T) {
	_, _, b := setup(t, "overwritten", pubsub.BucketConfig{})
	ctx := testCtx(t)
	first := publish(t, b, "a", 1)
	publish(t, b, "a", 2)
	other := publish(t, b, "b", 3)
	require.NoError(t, b.Unpublish(ctx, "b"))
	got, err := b.Origin(ctx, "a", first)
	require.NoError(t, err)
	require.Equal(t, pubsub.Superseded, got)
	got, err = b.Origin(ctx, "b", other)
	require.NoError(t, err)
	require.Equal(t, pubsub.Superseded, got, "overwritten by a delete marker")
	got, err = b.Origin(ctx, "c", first)
	require.NoError(t, err)
	require.Equal(t, pubsub.Written, got, "a revision of another key (a resynchronised delete)")
}

// A client that does not administer the bus (an agent, a person's tool) waits for the bucket:
// OpenOnly never creates it, and opens it once it exists.
func TestOpenOnlyNeverCreates(t *testing.T) {
	_, js, _ := setup(t, "existing", pubsub.BucketConfig{})
	ctx := testCtx(t)
	_, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "later", OpenOnly: true}, nil)
	require.ErrorIs(t, err, pubsub.ErrBucketMissing)
	_, err = js.KeyValue(ctx, "later")
	require.Error(t, err, "OpenOnly created the bucket")
	_, err = pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "later"}, nil)
	require.NoError(t, err)
	b, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "later", OpenOnly: true}, nil)
	require.NoError(t, err)
	require.Equal(t, "later", b.Name())
}

// GetChecked reads a key with one direct get and tells a server copy (aimed there by another
// client's direct get) from a client's write, a delete, and a missing key.
func TestGetCheckedTellsCopies(t *testing.T) {
	_, js, b := setup(t, "checked", pubsub.BucketConfig{History: 5})
	ctx := testCtx(t)
	revA := publish(t, b, "a", 1)
	publish(t, b, "b", 2)

	v, rev, o, err := b.GetChecked(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, record{N: 1, S: "a"}, v)
	require.Equal(t, revA, rev)
	require.Equal(t, pubsub.Written, o)

	nc := js.Conn()
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_checked.$KV.checked.a", "$KV.checked.b", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		v, _, err := b.Get(ctx, "b")
		return err == nil && v.N == 1
	}, 5*time.Second, 20*time.Millisecond, "a's value was copied under b")
	v, rev, o, err = b.GetChecked(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, record{N: 1, S: "a"}, v, "the copy's payload is a's")
	require.Greater(t, rev, revA)
	require.Equal(t, pubsub.Copied, o)

	// A copy of the copy keeps being one.
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_checked.$KV.checked.b", "$KV.checked.c", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		_, _, o, err := b.GetChecked(ctx, "c")
		return err == nil && o == pubsub.Copied
	}, 5*time.Second, 20*time.Millisecond)

	_, _, _, err = b.GetChecked(ctx, "missing")
	require.ErrorIs(t, err, pubsub.ErrNotFound)
	require.NoError(t, b.Unpublish(ctx, "a"))
	_, _, _, err = b.GetChecked(ctx, "a")
	require.ErrorIs(t, err, pubsub.ErrNotFound)
	_, err = b.PublishIfRevision(ctx, "b", record{N: 2, S: "b"}, rev, true)
	require.NoError(t, err)
	_, _, o, err = b.GetChecked(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, pubsub.Restored, o)
}

// With a writer mark, a copy of a payload alone (a direct get asking for no headers) is told
// from the writer's own value too: it carries no header at all.
func TestWriterMarkTellsPayloadOnlyCopies(t *testing.T) {
	_, js, b := setup(t, "marked", pubsub.BucketConfig{History: 5, WriterMark: "Test-Writer"})
	ctx := testCtx(t)
	revA := publish(t, b, "a", 1)
	_, _, o, err := b.GetChecked(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, pubsub.Written, o)
	o, err = b.Origin(ctx, "a", revA)
	require.NoError(t, err)
	require.Equal(t, pubsub.Written, o)

	nc := js.Conn()
	for _, c := range []struct {
		to   string
		body []byte
	}{{"nohdr", []byte(`{"no_hdr":true}`)}, {"withhdr", nil}} {
		require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_marked.$KV.marked.a", "$KV.marked."+c.to, c.body))
		require.NoError(t, nc.Flush())
		var rev uint64
		require.Eventually(t, func() bool {
			var v record
			v, rev, o, err = b.GetChecked(ctx, c.to)
			return err == nil && v.N == 1
		}, 5*time.Second, 20*time.Millisecond, "a's value was not copied under %s", c.to)
		require.Equal(t, pubsub.Copied, o, "GetChecked of the %s copy", c.to)
		o, err = b.Origin(ctx, c.to, rev)
		require.NoError(t, err)
		require.Equal(t, pubsub.Copied, o, "Origin of the %s copy", c.to)
	}
	// The writer's conditional writes carry the mark too.
	_, rev, _, err := b.GetChecked(ctx, "nohdr")
	require.NoError(t, err)
	rev, err = b.PublishIfRevision(ctx, "nohdr", record{N: 2, S: "nohdr"}, rev, true)
	require.NoError(t, err)
	_, _, o, err = b.GetChecked(ctx, "nohdr")
	require.NoError(t, err)
	require.Equal(t, pubsub.Restored, o)
	rev, err = b.PublishIfLast(ctx, "c", record{N: 3, S: "c"}, rev)
	require.NoError(t, err)
	o, err = b.Origin(ctx, "c", rev)
	require.NoError(t, err)
	require.Equal(t, pubsub.Written, o)
}

// A stored message that looks like a status reply is a copy, never "not found": any client may
// put a header named Status (or Description) on its own write and have the server copy that
// message under another key, and a direct get of a missing key aimed at another key stores the
// server's own "404 Message Not Found" there. GetChecked used to read the Status header before
// looking for Nats-Sequence, and answered "no value, revision 0, Written" for a stored copy (the
// review's finding 1), while Origin said Copied.
func TestStatusHeaderOnAStoredMessageIsACopy(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, js := testenv.ConnectNATS(t, srv.ClientURL())
	ctx := testCtx(t)
	marked, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "st", History: 5, WriterMark: "Mark"}, nil)
	require.NoError(t, err)
	plain, err := pubsub.OpenBucket[record](ctx, js, pubsub.BucketConfig{Name: "req", History: 5}, nil)
	require.NoError(t, err)
	publish(t, marked, "b", 1)
	publish(t, plain, "b", 1)

	for _, c := range []struct {
		name   string
		status string // the header put on the attacker's own write; empty: none written
		descr  string
		mark   bool
		data   string
	}{
		{"Status 404 with a value", "404", "", true, `{"n":2,"s":"b"}`},
		{"Status 404 alone", "404", "Message Not Found", false, ""},
		{"Status 503", "503", "", true, `{"n":2,"s":"b"}`},
		// nats.go's requests take this reply for the server's "no responders".
		{"Status 503 alone", "503", "", true, ""},
		{"Description alone", "", "Idle Heartbeat", true, `{"n":2,"s":"b"}`},
		// Stored with no header at all: told by the writer mark only (an unmarked bucket
		// cannot tell it from its writer's empty value, see the README's payload-only copy).
		{"the server's own 404 reply", "", "", false, ""},
	} {
		// The attacker's own key, and the direct get whose reply (the stored message, or the
		// server's 404 for a key never written) lands under b.
		from := "a"
		if c.status != "" || c.descr != "" {
			m := nats.NewMsg("$KV.req.a")
			m.Data = []byte(c.data)
			if c.status != "" {
				m.Header.Set("Status", c.status)
			}
			if c.descr != "" {
				m.Header.Set("Description", c.descr)
			}
			if c.mark {
				m.Header.Set("Mark", "1")
			}
			_, err := js.PublishMsg(ctx, m)
			require.NoError(t, err)
		} else {
			from = "never-written"
		}
		into := []*pubsub.Bucket[record]{marked, plain}
		if from == "never-written" {
			into = into[:1]
		}
		for _, into := range into {
			last := latestRev(t, into, "b")
			require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_req.$KV.req."+from, "$KV."+into.Name()+".b", nil))
			require.NoError(t, nc.Flush())
			require.Eventually(t, func() bool { return latestRev(t, into, "b") > last }, 5*time.Second, 20*time.Millisecond,
				"%s: the copy did not land under %s", c.name, into.Name())
			rev := latestRev(t, into, "b")

			_, got, origin, err := into.GetChecked(ctx, "b")
			require.Equal(t, pubsub.Copied, origin, "%s under %s: GetChecked (err %v)", c.name, into.Name(), err)
			require.Equal(t, rev, got, "%s under %s: the copy's revision", c.name, into.Name())
			if err != nil {
				require.ErrorIs(t, err, pubsub.ErrDecode, "%s under %s", c.name, into.Name())
			}
			o, err := into.Origin(ctx, "b", rev)
			require.NoError(t, err)
			require.Equal(t, pubsub.Copied, o, "%s under %s: Origin", c.name, into.Name())
		}
	}
	// A server's real answer for a missing key still reads as one.
	_, rev, origin, err := plain.GetChecked(ctx, "missing")
	require.ErrorIs(t, err, pubsub.ErrNotFound)
	require.Equal(t, uint64(0), rev)
	require.Equal(t, pubsub.Written, origin)
}

// latestRev is the revision of key's newest stored message (0: none).
func latestRev(t *testing.T, b *pubsub.Bucket[record], key string) uint64 {
	t.Helper()
	h, err := b.History(testCtx(t), key)
	require.NoError(t, err)
	if len(h) == 0 {
		return 0
	}
	return h[0].Rev
}

// GetStored reads what GetChecked reads, through the stream's message API (no direct get), and
// judges it the same way: the coordinator's fallback when a direct get does not answer.
func TestGetStoredAgreesWithGetChecked(t *testing.T) {
	_, js, b := setup(t, "stored", pubsub.BucketConfig{History: 5, WriterMark: "Test-Writer"})
	ctx := testCtx(t)
	nc := js.Conn()
	copyInto := func(from, into string, body []byte) {
		require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_stored.$KV.stored."+from, "$KV.stored."+into, body))
		require.NoError(t, nc.Flush())
		require.Eventually(t, func() bool { return latestRev(t, b, into) > 0 }, 5*time.Second, 20*time.Millisecond)
	}
	publish(t, b, "written", 1)
	copyInto("written", "copied", nil)
	copyInto("written", "payload-only", []byte(`{"no_hdr":true}`))
	publish(t, b, "deleted", 2)
	require.NoError(t, b.Unpublish(ctx, "deleted"))
	copyInto("deleted", "copied-delete", nil)
	m := nats.NewMsg("$KV.stored.status")
	m.Header.Set("Status", "404")
	m.Header.Set("Test-Writer", "1")
	m.Data = []byte(`{"n":3,"s":"status"}`)
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	rev := publish(t, b, "restored", 4)
	_, err = b.PublishIfRevision(ctx, "restored", record{N: 5, S: "restored"}, rev, true)
	require.NoError(t, err)
	m = nats.NewMsg("$KV.stored.garbage")
	m.Header.Set("Test-Writer", "1")
	m.Data = []byte("{")
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)

	for _, key := range []string{"written", "copied", "payload-only", "deleted", "copied-delete", "status", "restored", "garbage", "missing"} {
		v1, rev1, o1, err1 := b.GetChecked(ctx, key)
		v2, rev2, o2, err2 := b.GetStored(ctx, key)
		require.Equal(t, v1, v2, key)
		require.Equal(t, rev1, rev2, key)
		require.Equal(t, o1, o2, key)
		require.Equal(t, errors.Is(err1, pubsub.ErrNotFound), errors.Is(err2, pubsub.ErrNotFound), "%s: %v, %v", key, err1, err2)
		require.Equal(t, errors.Is(err1, pubsub.ErrDecode), errors.Is(err2, pubsub.ErrDecode), "%s: %v, %v", key, err1, err2)
		require.Equal(t, err1 == nil, err2 == nil, "%s: %v, %v", key, err1, err2)
	}
	_, _, o, _ := b.GetStored(ctx, "copied-delete")
	require.Equal(t, pubsub.Copied, o)
	_, _, o, _ = b.GetStored(ctx, "restored")
	require.Equal(t, pubsub.Restored, o)
}

// Get reads a stored message with a Status header as the value it is: nats.go's get took one
// with "Status: 404" for "not found", and one with "Status: 503" and no payload for "no
// responders" (an error that, in the coordinator's forget, was retried for ever).
func TestGetReadsAStatusHeaderAsAValue(t *testing.T) {
	_, js, b := setup(t, "plain", pubsub.BucketConfig{History: 5})
	ctx := testCtx(t)
	for _, c := range []struct {
		status, data string
		decodes      bool
	}{{"404", `{"n":1,"s":"a"}`, true}, {"503", "", false}, {"408", "", false}} {
		m := nats.NewMsg("$KV.plain.a")
		m.Header.Set("Status", c.status)
		m.Data = []byte(c.data)
		ack, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		v, rev, err := b.Get(ctx, "a")
		require.Equal(t, ack.Sequence, rev, "Status %s", c.status)
		if c.decodes {
			require.NoError(t, err, "Status %s", c.status)
			require.Equal(t, record{N: 1, S: "a"}, v)
		} else {
			require.ErrorIs(t, err, pubsub.ErrDecode, "Status %s", c.status)
		}
	}
	require.NoError(t, b.Unpublish(ctx, "a"))
	_, rev, err := b.Get(ctx, "a")
	require.ErrorIs(t, err, pubsub.ErrNotFound)
	require.Zero(t, rev)
	_, _, err = b.Get(ctx, "never")
	require.ErrorIs(t, err, pubsub.ErrNotFound)
}

// GetCurrent reads a key as GetChecked does, answered only by a replica that has applied the
// revision asked for: a follower that lags answers a direct get from what it had applied (an
// older revision, or nothing), which nothing in a single direct get's reply tells. A replica
// whose last revision is below the one asked for, or that holds nothing under the key, makes it
// fail with ErrBehind (one server here: asking past its last revision is what a lagging follower
// would answer). It tells copies as GetChecked does.
func TestGetCurrentRefusesAReplicaBehind(t *testing.T) {
	_, js, b := setup(t, "current", pubsub.BucketConfig{History: 5})
	ctx := testCtx(t)
	publish(t, b, "a", 1)
	revA := publish(t, b, "a", 2)
	publish(t, b, "b", 3)
	last, err := b.LastRevision(ctx)
	require.NoError(t, err)

	v, rev, o, err := b.GetCurrent(ctx, "a", last)
	require.NoError(t, err)
	require.Equal(t, record{N: 2, S: "a"}, v)
	require.Equal(t, revA, rev)
	require.Equal(t, pubsub.Written, o)

	_, _, _, err = b.GetCurrent(ctx, "a", last+1)
	require.ErrorIs(t, err, pubsub.ErrBehind, "the replica that answered has not applied revision last+1")
	_, _, _, err = b.GetCurrent(ctx, "none", last)
	require.ErrorIs(t, err, pubsub.ErrBehind, "no message under the key: the replica cannot tell how far it is")

	require.NoError(t, b.Unpublish(ctx, "b"))
	last, err = b.LastRevision(ctx)
	require.NoError(t, err)
	_, rev, _, err = b.GetCurrent(ctx, "b", last)
	require.ErrorIs(t, err, pubsub.ErrNotFound, "a delete marker is no status, at its revision")
	require.Equal(t, last, rev)

	nc := js.Conn()
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.KV_current.$KV.current.a", "$KV.current.c", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		_, _, o, err := b.GetChecked(ctx, "c")
		return err == nil && o == pubsub.Copied
	}, 5*time.Second, 20*time.Millisecond)
	last, err = b.LastRevision(ctx)
	require.NoError(t, err)
	_, _, o, err = b.GetCurrent(ctx, "c", last)
	require.NoError(t, err)
	require.Equal(t, pubsub.Copied, o, "a server copy is told as GetChecked tells it")
}
