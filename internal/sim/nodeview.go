package sim

import (
	"strconv"
	"time"
)

// The coordinator's node informer delivers each change of a Node some time after it was made
// (more under load: the cluster tests saw a view still showing edgedrain's cordon record after
// the coordinator's own uncordon had returned). The model delays what admission's node view says
// of edgedrain's record, with the object's resourceVersion, by up to maxViewLag after the change,
// in order; the other facts of the view are read as they are.
const maxViewLag = 800 * time.Millisecond

// recordView is one delivered state of a Node's cordon record, visible from at.
type recordView struct {
	at     time.Time
	rv     int
	record bool
	// ours: the cordon is edgedrain's alone and not kept (what edgedrain lifts), as of rv.
	ours bool
}

// recordSeen returns what coordinator c's informer shows of node n's cordon record now, whether
// that cordon is edgedrain's alone and not kept, and the resourceVersion of that view: a change
// is queued as the view first meets it and delivered a random delay later, after every change
// before it.
func (c *coord) recordSeen(n *node) (record, ours bool, rv string) {
	if c.views == nil {
		c.views = map[string][]recordView{}
	}
	q := c.views[n.name]
	live := recordView{rv: n.rv, record: n.annotation != "", ours: n.ours() && n.keep == ""}
	if len(q) == 0 {
		live.at = c.now()
		c.views[n.name] = []recordView{live}
		return live.record, live.ours, rvString(live.rv, true)
	}
	if last := q[len(q)-1]; last.rv != live.rv {
		live.at = later(c.now().Add(time.Duration(c.s.vrng.Int64N(int64(maxViewLag)))), last.at)
		q = append(q, live)
	}
	// Drop what a later delivered view hides; the first is the view now.
	for len(q) > 1 && !q[1].at.After(c.now()) {
		q = q[1:]
	}
	c.views[n.name] = q
	return q[0].record, q[0].ours, rvString(q[0].rv, true)
}

// rvString is the resourceVersion the API server would give the model's counter rv of a Node (a
// positive integer); "" when not known.
func rvString(rv int, known bool) string {
	if !known {
		return ""
	}
	return strconv.Itoa(rv + 1)
}
