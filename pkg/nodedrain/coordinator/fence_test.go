package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A refused status write reads the term record as of the bucket's last revision (the stream
// leader's, LastRevision): a direct get may be answered by a follower that lags, which answers
// with the record it had, this run's own while another coordinator's is written after it, and
// the run stepped over the takeover and wrote after it (simulation with replicated buckets, seed
// 8000773, S1). One server here: asking for a revision past its last is what a follower behind
// the leader is asked; its answer is not taken, and with the stream's message API refused too
// (no stream leader, or the JetStream API without a meta leader) the fence cannot tell: an
// error, never "not taken over".
func TestFenceTakesNoTermRecordFromAReplicaBehind(t *testing.T) {
	bus := testenv.StartBusWith(t, pubsub.EmbeddedConfig{Authentication: denyReads{
		"$JS.API.STREAM.MSG.GET.KV_" + nodedrain.StatusBucket,
	}}, pubsub.ConnectOptions{})
	_, js := testenv.ConnectNATSWith(t, pubsub.ConnectOptions{URLs: []string{bus.NATS.ClientURL()}, User: "restricted", Password: "x"})
	e, _ := engineOn(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	last, err := e.statuses.LastRevision(ctx)
	require.NoError(t, err)
	over, err := e.takenOver(ctx, last)
	require.NoError(t, err)
	require.False(t, over, "the run's own record, read from a current replica")

	over, err = e.takenOver(ctx, last+1)
	require.Error(t, err, "a replica behind the revision asked for is not taken for its answer")
	require.False(t, over)

	terms, err := pubsub.OpenBucket(ctx, bus.JS, pubsub.BucketConfig{Name: nodedrain.StatusBucket, WriterMark: nodedrain.StatusWriterMark},
		nodedrain.TermCodec{})
	require.NoError(t, err)
	_, err = terms.Publish(ctx, nodedrain.TermKey, nodedrain.Term{Coordinator: "other", Since: time.Now()})
	require.NoError(t, err)
	last, err = e.statuses.LastRevision(ctx)
	require.NoError(t, err)
	over, err = e.takenOver(ctx, last)
	require.NoError(t, err)
	require.True(t, over, "another coordinator's record")
}
