package busauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgedrain/edgedrain/pkg/busauth"
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

func TestEmbeddedBusRefusesAttacks(t *testing.T) {
	w := newWorld(t)
	w.startEmbedded(t)
	attackSuite(t, w)
}

// attackSuite is what a client of the cluster network tries against the bus, as an attacker
// would: every refusal must be the server's permission error, and nothing may change.
func attackSuite(t *testing.T, w *world) {
	ctx := context.Background()
	req, st := nodedrain.RequestsBucket, nodedrain.StatusBucket
	n0, n1 := w.nodes[0], w.nodes[1]
	coordReq, err := w.coord.KeyValue(ctx, req)
	require.NoError(t, err)
	coordSt, err := w.coord.KeyValue(ctx, st)
	require.NoError(t, err)
	_, err = coordReq.Put(ctx, n1, []byte(`{"Node":"`+n1+`","RequestID":"r-n1"}`))
	require.NoError(t, err)
	_, err = coordSt.Put(ctx, n1, []byte(`{"Node":"`+n1+`","RequestID":"r-n1","Status":3}`))
	require.NoError(t, err)
	_, err = coordSt.Put(ctx, n0, []byte(`{"Node":"`+n0+`","Status":2}`))
	require.NoError(t, err)

	t.Run("anonymous and wrong passwords", func(t *testing.T) {
		_, err := w.connect(t)
		require.ErrorIs(t, err, nats.ErrAuthorization, "anonymous")
		_, err = w.connect(t, nats.UserInfo(busauth.OperatorUser, "wrong"))
		require.ErrorIs(t, err, nats.ErrAuthorization, "wrong operator password")
		_, err = w.connect(t, nats.UserInfo(busauth.CoordinatorUser, "wrong"))
		require.ErrorIs(t, err, nats.ErrAuthorization, "wrong coordinator password")
		_, err = w.connect(t, nats.Token("not-a-token"))
		require.ErrorIs(t, err, nats.ErrAuthorization, "garbage token")
	})

	a := w.agent(t, 0)
	kvReq, err := a.js.KeyValue(ctx, req)
	require.NoError(t, err, "an agent finds the requests bucket")
	kvSt, err := a.js.KeyValue(ctx, st)
	require.NoError(t, err, "an agent finds the status bucket")

	t.Run("agent does its own job", func(t *testing.T) {
		_, err := kvReq.Put(ctx, n0, []byte(`{"Node":"`+n0+`","RequestID":"r-n0"}`))
		require.NoError(t, err, "put its own request")
		e, err := kvReq.Get(ctx, n0)
		require.NoError(t, err, "read its own request")
		assert.Contains(t, string(e.Value()), "r-n0")
		require.NoError(t, kvReq.Delete(ctx, n0), "withdraw its own request")
		e, err = kvSt.Get(ctx, n0)
		require.NoError(t, err, "read its own status")
		assert.Contains(t, string(e.Value()), `"Status":2`)
		wa, err := kvSt.Watch(ctx, n0)
		require.NoError(t, err, "watch its own status")
		defer func() { _ = wa.Stop() }()
		select {
		case e := <-wa.Updates():
			require.NotNil(t, e)
			assert.Equal(t, n0, e.Key())
		case <-time.After(5 * time.Second):
			t.Fatal("the agent's watch of its own status delivered nothing")
		}
	})

	t.Run("agent cannot speak for another node", func(t *testing.T) {
		a.refused(t, "put node-1's request", "$KV."+req+"."+n1, func(ctx context.Context) error {
			_, err := kvReq.Put(ctx, n1, []byte(`{"Node":"`+n1+`","RequestID":"forged"}`))
			return err
		})
		a.refused(t, "delete node-1's request", "$KV."+req+"."+n1, func(ctx context.Context) error {
			return kvReq.Delete(ctx, n1)
		})
		a.refused(t, "purge node-1's request", "$KV."+req+"."+n1, func(ctx context.Context) error {
			return kvReq.Purge(ctx, n1)
		})
		for _, n := range []string{n0, n1} {
			a.refused(t, "write "+n+"'s status", "$KV."+st+"."+n, func(ctx context.Context) error {
				_, err := kvSt.Put(ctx, n, []byte(`{"Node":"`+n+`","RequestID":"r-n1","Status":9}`))
				return err
			})
		}
		a.refused(t, "read node-1's status", "$JS.API.DIRECT.GET.KV_"+st+".$KV."+st+"."+n1, func(ctx context.Context) error {
			_, err := kvSt.Get(ctx, n1)
			return err
		})
		a.refused(t, "read node-1's request", "$JS.API.DIRECT.GET.KV_"+req+".$KV."+req+"."+n1, func(ctx context.Context) error {
			_, err := kvReq.Get(ctx, n1)
			return err
		})
		a.refused(t, "watch node-1's status", "$JS.API.CONSUMER.CREATE.KV_"+st, func(ctx context.Context) error {
			wa, err := kvSt.Watch(ctx, n1)
			if err == nil {
				_ = wa.Stop()
			}
			return err
		})
		a.refused(t, "watch every status", "$JS.API.CONSUMER.CREATE.KV_"+st, func(ctx context.Context) error {
			wa, err := kvSt.WatchAll(ctx)
			if err == nil {
				_ = wa.Stop()
			}
			return err
		})
		a.refused(t, "list the request keys", "$JS.API.CONSUMER.CREATE.KV_"+req, func(ctx context.Context) error {
			_, err := kvReq.Keys(ctx)
			return err
		})
	})

	t.Run("agent cannot administer the bus", func(t *testing.T) {
		a.refused(t, "delete the requests stream", "$JS.API.STREAM.DELETE.KV_"+req, func(ctx context.Context) error {
			return a.js.DeleteStream(ctx, "KV_"+req)
		})
		a.refused(t, "purge the status stream", "$JS.API.STREAM.PURGE.KV_"+st, func(ctx context.Context) error {
			s, err := a.js.Stream(ctx, "KV_"+st)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
		a.refused(t, "change the requests bucket", "$JS.API.STREAM.UPDATE.KV_"+req, func(ctx context.Context) error {
			_, err := a.js.UpdateStream(ctx, jetstream.StreamConfig{Name: "KV_" + req, Subjects: []string{"$KV." + req + ".>"}, MaxMsgsPerSubject: 1})
			return err
		})
		a.refused(t, "create a bucket", "$JS.API.STREAM.CREATE.KV_evil", func(ctx context.Context) error {
			_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_evil", Subjects: []string{"$KV.evil.>"}})
			return err
		})
		a.refused(t, "consume the requests stream", "$JS.API.CONSUMER.CREATE.KV_"+req, func(ctx context.Context) error {
			_, err := a.js.CreateOrUpdateConsumer(ctx, "KV_"+req, jetstream.ConsumerConfig{FilterSubject: "$KV." + req + "." + n1})
			return err
		})
		a.refused(t, "delete a consumer of the requests stream", "$JS.API.CONSUMER.DELETE.KV_"+req, func(ctx context.Context) error {
			return a.js.DeleteConsumer(ctx, "KV_"+req, "anyone")
		})
		a.refused(t, "list the status stream's consumers", "$JS.API.CONSUMER.NAMES.KV_"+st, func(ctx context.Context) error {
			_, err := a.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.NAMES.KV_"+st, nil)
			return err
		})
	})

	t.Run("agent cannot listen to others", func(t *testing.T) {
		a.subRefused(t, "_INBOX.>")
		a.subRefused(t, "$KV.>")
		a.subRefused(t, nodedrain.AgentInboxPrefix(n1)+".>")
	})

	t.Run("what an agent makes the server write elsewhere is recognisable", func(t *testing.T) {
		// NATS permissions cannot stop this: the server lets the agent name any deliver subject
		// for a consumer of its own status, and any reply subject for its own requests, so it
		// can make the server write there. It must never trigger the JetStream API, and what
		// lands under node-1's request key must be either no request of node-1 (the coordinator
		// ignores it) or a server copy (pubsub.Bucket.Origin; the coordinator ignores it too).
		before, err := coordReq.Get(ctx, n1)
		require.NoError(t, err)
		for i, target := range []string{"$KV." + req + "." + n1, "$JS.API.STREAM.DELETE.KV_" + req, "$JS.API.STREAM.PURGE.KV_" + req} {
			cfg, err := json.Marshal(map[string]any{"stream_name": "KV_" + st, "config": map[string]any{
				"deliver_subject": target, "filter_subject": "$KV." + st + "." + n0,
				"ack_policy": "none", "deliver_policy": "all"}})
			require.NoError(t, err)
			_, err = a.nc.Request(fmt.Sprintf("$JS.API.CONSUMER.CREATE.KV_%s.redirect%d.$KV.%s.%s", st, i, st, n0), cfg, 2*time.Second)
			require.NoError(t, err)
		}
		forged, err := nodedrain.EncodeRequest(nodedrain.NodeDrainRequest{Node: n1, RequestID: "forged", RequestedAt: time.Now(),
			RequestedBy: nodedrain.RequesterDeviceOp, Context: "reboot"})
		require.NoError(t, err)
		_, err = kvReq.Put(ctx, n0, forged) // a request of node-1 under its own key
		require.NoError(t, err)
		require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+req+".$KV."+req+"."+n0, "$KV."+req+"."+n1, nil))
		require.NoError(t, kvReq.Delete(ctx, n0))
		require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+req+".$KV."+req+"."+n0, "$KV."+req+"."+n1, nil))
		require.NoError(t, a.nc.Flush())

		requests, err := pubsub.OpenBucket(ctx, w.coord, pubsub.BucketConfig{Name: req}, nodedrain.RequestCodec{})
		require.NoError(t, err)
		var landed []jetstream.KeyValueEntry
		require.Eventually(t, func() bool {
			h, err := coordReq.History(ctx, n1)
			landed = nil
			forgedPut, marker := false, false
			for _, e := range h {
				if e.Revision() > before.Revision() {
					landed = append(landed, e)
					forgedPut = forgedPut || strings.Contains(string(e.Value()), `"forged"`)
					marker = marker || e.Operation() == jetstream.KeyValueDelete
				}
			}
			// The consumer's deliveries may land too (not always: the server delivers only
			// once it sees interest); the two direct-get copies always do.
			return err == nil && forgedPut && marker
		}, 5*time.Second, 50*time.Millisecond, "the attacks did not land as they did when this test was written")
		for _, e := range landed {
			r, err := nodedrain.DecodeRequest(e.Value())
			asRequest := e.Operation() == jetstream.KeyValuePut && err == nil && r.Node == n1
			if e.Operation() == jetstream.KeyValuePut && !asRequest {
				continue // no request of node-1: ignored by the coordinator
			}
			o, err := requests.Origin(ctx, n1, e.Revision())
			require.NoError(t, err)
			assert.Equal(t, pubsub.Copied, o, "revision %d (%s %q) under node-1's key looks like its agent's own write", e.Revision(), e.Operation(), e.Value())
		}
		for _, s := range []string{"KV_" + req, "KV_" + st} {
			_, err := w.coord.Stream(ctx, s)
			require.NoError(t, err, "stream %s is gone", s)
		}
	})

	t.Run("operator reads everything and withdraws", func(t *testing.T) {
		op, err := w.connect(t, nats.UserInfo(busauth.OperatorUser, w.opPW))
		require.NoError(t, err)
		kv, err := op.js.KeyValue(ctx, st)
		require.NoError(t, err)
		keys, err := kv.Keys(ctx)
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{n0, n1}, keys)
		kr, err := op.js.KeyValue(ctx, req)
		require.NoError(t, err)
		require.NoError(t, kr.Delete(ctx, n1), "withdraw node-1's request")
		op.refused(t, "operator writes a status", "$KV."+st+"."+n1, func(ctx context.Context) error {
			_, err := kv.Put(ctx, n1, []byte(`{"Status":9}`))
			return err
		})
		op.refused(t, "operator deletes a stream", "$JS.API.STREAM.DELETE.KV_"+req, func(ctx context.Context) error {
			return op.js.DeleteStream(ctx, "KV_"+req)
		})
		// It reads through consumers: a direct get, whose reply (the stored message) it could
		// aim at a status key, is refused.
		statuses, err := pubsub.OpenBucket(ctx, op.js, pubsub.BucketConfig{Name: st, OpenOnly: true}, nodedrain.StatusCodec{})
		require.NoError(t, err)
		values, _, err := statuses.ReadAll(ctx)
		require.NoError(t, err)
		assert.Contains(t, values, n0)
		op.refused(t, "operator sends a direct get", "$JS.API.DIRECT.GET.KV_"+st+".$KV."+st+"."+n0, func(ctx context.Context) error {
			_, err := kv.Get(ctx, n0)
			return err
		})
	})
}
