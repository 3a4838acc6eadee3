package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
)

// TestRecorderTellsASequenceThatHeldNoMessageFromALostOne: a message its key's limit dropped is
// lost (the history has a hole); a missing sequence no key can have dropped is a gap (a
// clustered stream's skip, played here by deleting a message of a key below its limit: the rule
// cannot tell the two, which is why gaps are counted, not judged); the leader's read returns a
// stored message as it was.
func TestRecorderTellsASequenceThatHeldNoMessageFromALostOne(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A bucket's stream as the KV layer makes it, but one that allows a message's deletion.
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_t", Subjects: []string{"$KV.t.>"}, MaxMsgsPerSubject: 2})
	require.NoError(t, err)
	for _, m := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}} { // a keeps 2 and 3; b is 4
		_, err := js.Publish(ctx, "$KV.t."+m[0], []byte(m[1]))
		require.NoError(t, err)
	}
	require.NoError(t, stream.DeleteMsg(ctx, 4))
	r := &streamRecorder{stream: stream, nc: nc}

	msg, err := leaderGet(ctx, nc, "KV_t", 2)
	require.NoError(t, err)
	assert.Equal(t, "$KV.t.a", msg.Subject)
	assert.Equal(t, "a2", string(msg.Data))
	assert.EqualValues(t, 2, msg.Sequence)
	for _, seq := range []uint64{1, 4} {
		_, err = leaderGet(ctx, nc, "KV_t", seq)
		require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "sequence %d", seq)
	}

	skipped, err := r.skipped(ctx, 1)
	require.NoError(t, err)
	assert.False(t, skipped, "sequence 1 was a's, dropped by its limit: lost")
	skipped, err = r.skipped(ctx, 4)
	require.NoError(t, err)
	assert.True(t, skipped, "no key has dropped a message at or past 4")
}
