package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/pubsub"
)

// copyCheckAttempts bounds the reads that tell a request from a server copy; when the bus does
// not answer, the value is taken as the client's own (the attack then needs a bus failure at the
// very moment, and a withdrawal is never lost).
const copyCheckAttempts = 3

// A client that may read a bus key (an agent its own request key) can have the server copy that
// message under another key of the same bucket: a direct get whose reply subject is the other
// key. Bus permissions cannot stop it. An agent could so plant a request under another node's
// key, or copy its own delete marker there (a withdrawal of the other node's request). Such a
// copy carries the server's headers; the engine ignores it and repairs the key (see repair).

// origin tells a request event written by a client from a server copy (counted and logged) and
// from one a newer value of the key has replaced (skipped: the newer value's event follows, as
// for a watcher that lagged; so a second copy cannot hide the first).
func (e *Engine) origin(ctx context.Context, ev pubsub.Event[nodedrain.NodeDrainRequest]) pubsub.Origin {
	var err error
	for attempt := 1; attempt <= copyCheckAttempts; attempt++ {
		var o pubsub.Origin
		if o, err = e.requests.Origin(ctx, ev.Key, ev.Revision); err == nil {
			if o == pubsub.Copied {
				e.metrics.ForgedRequests.Inc()
				e.warnings.Logger("request-copied", e.log).WithFields(logrus.Fields{"node": ev.Key, "revision": ev.Revision}).
					Warn("ignoring a drain request change that is a server copy of another key's message (a client redirected a reply into this key)")
			}
			return o
		}
		if ctx.Err() != nil {
			return pubsub.Written
		}
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	e.warnings.Logger("request-copy-check", e.log).WithField("node", ev.Key).WithError(err).
		Warn("cannot tell whether a drain request change is a server copy; taking it as written")
	return pubsub.Written
}

// repair puts back, under key, the request the engine serves for that node (none: a delete), on
// condition that the value it ignored at rev is still the latest. The node's agent then finds
// its own request there again, so its withdrawal reaches the engine; without this, an agent that
// finds a value it did not write leaves it, and the node would stay cordoned. A copy is always
// undone; another unusable value (undecodable, or naming another node) only while the engine
// serves a request for the node: an idle node's agent overwrites such a value when it asks, and
// a flood of them then costs no writes.
func (e *Engine) repair(ctx context.Context, key string, rev uint64, copied bool) {
	if nodedrain.ValidNodeName(key) != nil {
		return
	}
	d, serving := e.core.Drain(key)
	serving = serving && d.Request != nil
	if !copied && !serving {
		return
	}
	var err error
	if serving {
		_, err = e.requests.PublishIfRevision(ctx, key, *d.Request, rev)
	} else {
		err = e.requests.UnpublishRevision(ctx, key, rev)
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
