package coordinator

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// Drain requests enter here: every change of a node's request key on the bus reaches
// requestEvent, which steps the node's drain (nodedrain.EvRequest) once it knows the node's own
// agent wrote the value. The rest of this file tells the agent's writes from copies.

// requestHistory is how many values of each node's request key the bus keeps: enough to find the
// last value the node's agent wrote under a few copies the server was made to write on top.
const requestHistory = 8

// A client that may read a bus key (an agent its own request key) can have the server copy that
// message under another key of the same bucket: a direct get whose reply subject is the other
// key. Bus permissions cannot stop it. An agent could so plant a request under another node's
// key, or copy its own delete marker there (a withdrawal of the other node's request). Such a
// copy carries the server's headers (pubsub.Bucket.Origin). The engine never acts on a copy: it
// acts on the newest value of the key that the node's agent wrote (reconcileKey), and puts that
// value back on top of the copy. When the bus cannot tell (no answer), the key is looked at
// again every tick; nothing is taken as written unchecked.

// requestEvent handles a change of a node's request key.
func (e *Engine) requestEvent(ctx context.Context, ev pubsub.Event[nodedrain.NodeDrainRequest]) {
	switch ev.Kind {
	case pubsub.EventPut, pubsub.EventDelete:
		o, err := e.requests.Origin(ctx, ev.Key, ev.Revision)
		switch {
		case err != nil:
			e.recheckLater(ev.Key, err)
			return
		case o == pubsub.Superseded:
			return // a newer value's event follows
		case o == pubsub.Copied:
			e.copyFound(ev.Key, ev.Revision)
			e.reconcileKey(ctx, ev.Key)
			return
		case ev.Kind == pubsub.EventPut && !e.checkKey(ev.Key, ev.Value.Node):
			e.reconcileServed(ctx, ev.Key)
			return
		}
		var req *nodedrain.NodeDrainRequest
		if ev.Kind == pubsub.EventPut {
			r := ev.Value
			req = &r
		}
		e.step(ctx, ev.Key, nodedrain.EvRequest{Request: req})
	case pubsub.EventDecodeError:
		// Counted by the bucket; the node's drain is left as it was.
		e.warnings.Logger("request-undecodable", e.log).WithField("node", ev.Key).WithError(ev.Err).Warn("ignoring a drain request that does not decode")
		e.reconcileServed(ctx, ev.Key)
	}
}

// reconcileServed reconciles a key that got an unusable value only while the engine serves a
// request for its node: an idle node's agent overwrites such a value when it asks, so a flood of
// them costs no history reads and no writes.
func (e *Engine) reconcileServed(ctx context.Context, key string) {
	if d, ok := e.core.Drain(key); ok && d.Request != nil {
		e.reconcileKey(ctx, key)
	}
}

// genuine is the newest value of a node's request key its agent wrote: a request, or none (a
// withdrawal, or no value). known is false when the kept history holds only copies and unusable
// values.
type genuine struct {
	req          *nodedrain.NodeDrainRequest
	known        bool
	latest       uint64 // the key's newest revision
	latestIsOwn  bool   // the newest revision is that value itself
	newestCopied bool   // the newest revision is a server copy
}

// copyFound counts and logs (sampled) a server copy under key.
func (e *Engine) copyFound(key string, rev uint64) {
	e.metrics.ForgedRequests.Inc()
	e.warnings.Logger("request-copied", e.log).WithFields(logrus.Fields{"node": key, "revision": rev}).
		Warn("ignoring a drain request change that is a server copy of another key's message (a client redirected a reply into this key)")
}

// lastGenuine reads key's kept history for the newest value its agent wrote. Copies are counted
// by whoever found them first (copyFound).
func (e *Engine) lastGenuine(ctx context.Context, key string) (genuine, error) {
	hist, err := e.requests.History(ctx, key)
	if err != nil || len(hist) == 0 {
		return genuine{known: err == nil}, err
	}
	g := genuine{latest: hist[0].Rev}
	for i, r := range hist {
		o, err := e.requests.Origin(ctx, key, r.Rev)
		if err != nil {
			return genuine{}, err
		}
		if o == pubsub.Copied {
			g.newestCopied = g.newestCopied || i == 0
			continue
		}
		// A value the engine put back is not the agent's word (else a repair made while only
		// copies were left would pass for it, and hide a withdrawal for good).
		if o != pubsub.Written || (!r.Deleted && (r.Err != nil || r.Value.Node != key)) {
			continue // superseded meanwhile, or unusable: look further back
		}
		g.known, g.latestIsOwn = true, i == 0
		if !r.Deleted {
			v := r.Value
			g.req = &v
		}
		return g, nil
	}
	return g, nil
}

// reconcileKey acts on the newest value of key that the node's agent wrote, and, when copies or
// unusable values lie on top of it, puts it back (a request, marked as put back, or a delete) on
// condition that the key has not changed again meanwhile; the node's agent then finds its own
// request there when it withdraws. With no value of the agent's in the kept history, the engine
// carries on as it was and writes nothing.
func (e *Engine) reconcileKey(ctx context.Context, key string) {
	if nodedrain.ValidNodeName(key) != nil {
		return
	}
	g, err := e.lastGenuine(ctx, key)
	if err != nil {
		e.recheckLater(key, err)
		return
	}
	e.settleKey(ctx, key, g)
}

// settleKey is reconcileKey once the key's history has been read (g).
func (e *Engine) settleKey(ctx context.Context, key string, g genuine) {
	delete(e.recheck, key)
	d, _ := e.core.Drain(key)
	want := g.req
	switch {
	case !g.known && d.Request != nil:
		// Only copies, values put back and unusable values are kept: what the agent last said
		// is not known. The engine goes on serving and writes nothing (a request it wrote now
		// would stand for the agent's word); the agent's next write decides.
		e.warnings.Logger("request-unknown", e.log).WithField("node", key).
			Warn("the node's request key holds no value its agent wrote (copies only): serving on as before")
		return
	case !g.known:
		// Nothing is served: the copy goes (an agent that asked meanwhile asks again).
	case !sameRequest(want, d.Request):
		e.step(ctx, key, nodedrain.EvRequest{Request: want})
	}
	if g.latestIsOwn || g.latest == 0 || !e.mayAct(ctx) {
		return
	}
	var err error
	if want != nil {
		_, err = e.requests.PublishIfRevision(ctx, key, *want, g.latest, true)
	} else {
		err = e.requests.UnpublishRevision(ctx, key, g.latest)
	}
	switch {
	case err == nil:
		e.warnings.Logger("request-repaired", e.log).WithField("node", key).Info("restored the node's request key after a value its agent did not write")
	case errors.Is(err, pubsub.ErrConflict):
		// Written again meanwhile: the newer value is handled on its own.
	default:
		e.warnings.Logger("request-repair", e.log).WithField("node", key).WithError(err).Warn("cannot restore the node's request key")
	}
}

// underWay reports whether a published status says a drain is under way (or done, COMPLETE):
// its request must be on the bus.
func underWay(st nodedrain.NodeDrainStatus) bool {
	return st.Status.InProgress() || st.Status == nodedrain.StatusComplete
}

func sameRequest(a, b *nodedrain.NodeDrainRequest) bool {
	return (a == nil) == (b == nil) && (a == nil || a.RequestID == b.RequestID)
}

// recheckLater remembers a key whose change could not be checked (the bus did not answer): it is
// looked at again every tick until it can be, and nothing is done with the change meanwhile.
func (e *Engine) recheckLater(key string, err error) {
	e.recheck[key] = true
	e.warnings.Logger("request-copy-check", e.log).WithField("node", key).WithError(err).
		Warn("cannot tell who wrote a drain request change; looking again shortly")
}

// recheckKeys looks again at the keys recheckLater remembered.
func (e *Engine) recheckKeys(ctx context.Context) {
	for _, key := range slices.Sorted(maps.Keys(e.recheck)) {
		e.reconcileKey(ctx, key)
	}
}
