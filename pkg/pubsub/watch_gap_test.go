package pubsub_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/internal/testenv"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// A watcher whose reader stops reading while a few keys are written many times over, with one
// value kept per key, is delivered past the revisions deleted meanwhile: a gap in the stream
// sequences its consumer delivers. It takes a new consumer from right after the last revision
// it took to tell deleted revisions from skipped ones (a NATS server that caught its copy of the
// stream up after a quorum loss went on past revisions it never delivered), and converges on
// every key's latest value without taking deleted revisions for skipped ones.
func TestWatchPastDeletedRevisionsChecksAndConverges(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := testenv.ConnectNATS(t, srv.ClientURL())
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	b, err := pubsub.OpenBucket[record](testCtx(t), js, pubsub.BucketConfig{Name: "gaps", History: 1, Logger: log}, nil)
	require.NoError(t, err)
	w := watch(t, b)
	expectEvents(t, w, snapshotDone())

	// Large values fill the consumer's flow-control window soon: the server holds its deliveries
	// while the watcher, unread, cannot take them, and deletes older values meanwhile.
	pad := strings.Repeat("x", 16<<10)
	want := map[string]record{}
	for i := range 3000 {
		key := fmt.Sprintf("node-%d", i%3)
		_, err := b.Publish(testCtx(t), key, record{N: i, S: pad})
		require.NoError(t, err)
		want[key] = record{N: i, S: pad}
	}
	converge(t, w, map[string]record{}, want)

	var checked, skipped int
	for _, e := range hook.AllEntries() {
		switch {
		case strings.Contains(e.Message, "checking with another"):
			checked++
		case strings.Contains(e.Message, "had skipped revisions"):
			skipped++
		}
	}
	assert.Positive(t, checked, "the consumer went on past deleted revisions: the watch checked with another")
	assert.Zero(t, skipped, "deleted revisions are not skipped ones")
}
