package pubsub

import (
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds, in the order a watcher first meets them.
const (
	// EventPut carries a key's new (or, in the snapshot, current) value.
	EventPut EventKind = iota + 1
	// EventDelete reports that a key was unpublished.
	EventDelete
	// EventSnapshotDone follows the current value of every key, exactly once
	// per watcher, also for an empty bucket.
	EventSnapshotDone
	// EventDecodeError reports a payload for Key that did not decode; Err
	// wraps ErrDecode. The watch goes on.
	EventDecodeError
	// EventReplaced reports that the bucket was replaced (deleted and created again, or a
	// server came back without its store): revisions start again, and every key's value
	// follows as in a snapshot.
	EventReplaced
)

// String returns the kind's name, e.g. "Put".
func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "Put"
	case EventDelete:
		return "Delete"
	case EventSnapshotDone:
		return "SnapshotDone"
	case EventDecodeError:
		return "DecodeError"
	case EventReplaced:
		return "Replaced"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change seen by a Watcher.
type Event[T any] struct {
	// Kind says what happened.
	Kind EventKind
	// Key is the key concerned; empty for EventSnapshotDone.
	Key string
	// Value is the decoded value for EventPut, the zero value otherwise.
	Value T
	// Revision is the bucket revision of the change; for EventSnapshotDone
	// it is the revision the snapshot is complete up to (unreported deletes
	// included; 0 for a bucket never written).
	Revision uint64
	// Err is set for EventDecodeError and wraps ErrDecode.
	Err error
}

// watchState turns the raw entries of successive JetStream key watchers into
// the events of one Watcher, without losses or duplicates.
type watchState struct {
	// lastRev is the highest revision processed: a resumed watch starts
	// after it and anything at or below it is a duplicate.
	lastRev      uint64
	snapshotDone bool
	// created identifies the bucket's stream; a change means the bucket was
	// replaced and revisions started again.
	created time.Time
	// present holds the keys the caller was given a value (or decode error)
	// for and no delete since.
	present map[string]struct{}
	// resync is non-nil while a replaced bucket is read again; it collects
	// the keys seen, so the others can be reported deleted at its end.
	resync map[string]struct{}
}

// startResync restarts from an empty revision history.
func (st *watchState) startResync(created time.Time) {
	st.created = created
	st.lastRev = 0
	st.resync = map[string]struct{}{}
}

// apply processes one entry (nil marks the end of a watcher's initial values)
// and returns the events to deliver, in order.
func apply[T any](st *watchState, b *Bucket[T], e *entry) []Event[T] {
	if e == nil {
		var out []Event[T]
		if st.resync != nil {
			gone := make([]string, 0)
			for key := range st.present {
				if _, ok := st.resync[key]; !ok {
					gone = append(gone, key)
				}
			}
			slices.Sort(gone)
			for _, key := range gone {
				delete(st.present, key)
				out = append(out, Event[T]{Kind: EventDelete, Key: key, Revision: st.lastRev})
			}
			st.resync = nil
		}
		if !st.snapshotDone {
			st.snapshotDone = true
			out = append(out, Event[T]{Kind: EventSnapshotDone, Revision: st.lastRev})
		}
		return out
	}

	rev := e.rev
	if rev <= st.lastRev {
		return nil // already processed before a resume
	}
	st.lastRev = rev
	key := e.key
	switch e.op {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		if _, ok := st.present[key]; !ok {
			return nil // never reported (e.g. deleted before the snapshot)
		}
		delete(st.present, key)
		return []Event[T]{{Kind: EventDelete, Key: key, Revision: rev}}
	}
	st.present[key] = struct{}{}
	if st.resync != nil {
		st.resync[key] = struct{}{}
	}
	v, err := b.decode(key, rev, e.value)
	if err != nil {
		return []Event[T]{{Kind: EventDecodeError, Key: key, Revision: rev, Err: err}}
	}
	return []Event[T]{{Kind: EventPut, Key: key, Value: v, Revision: rev}}
}
