package sim

import (
	"github.com/edgedrain/edgedrain/pkg/nodedrain"
)

// API-outage mode, as coordinator's outage.go: a leader whose Lease lapsed while the API did
// not answer goes on without Kubernetes writes, publishing statuses only while the status bucket
// has not been written since its own last write; any term record written by a coordinator that
// took over fences it.

// term identifies an engine run's term record.
type term struct {
	coord string
	inc   int
}

// claimTerm writes the run's term record before it acts (Engine.claimTerm).
func (c *coord) claimTerm() {
	s := c.s
	c.lastSeq = s.bus.write(bucketStatus, nodedrain.TermKey, term{coord: c.name, inc: c.inc}, c.name)
	c.termRev, c.seq = c.lastSeq, 0
	s.term = term{coord: c.name, inc: c.inc}
	s.w.logf("%s writes its term record", c.name)
}

// lapsed: the Lease was not renewed within the renew deadline. If the API did not answer and
// the API-unreachable rule is on, the run goes on in outage mode; otherwise leadership is lost.
func (c *coord) lapsed() {
	if !c.apiUp() && c.s.cfg.APIUnreachableTimeout > 0 && c.running {
		c.s.w.logf("%s lost the Lease to the API outage: outage mode", c.name)
		c.leader, c.outage = false, true
		c.s.outages++
		return
	}
	why := "could not renew the Lease"
	if !c.apiUp() {
		why += " (API unreachable)"
	}
	c.loseLeadership(why)
}

// leaveOutage ends outage mode and the run; the replica campaigns again.
func (c *coord) leaveOutage(why string) {
	c.s.w.logf("%s leaves outage mode: %s", c.name, why)
	c.outage = false
	c.stopEngine()
}

// fenced: a status write was refused because another coordinator wrote its term record since
// this run's: in outage mode the mode ends; leading, the run stops and restarts (KeepRunning),
// which writes a term record only while the Lease is still held.
func (c *coord) fenced(st nodedrain.NodeDrainStatus) {
	c.s.fenced++
	c.s.w.logf("%s: %s %s not published, another coordinator wrote since (fenced)", c.name, st.Node, st.Status)
	if c.outage {
		c.leaveOutage("another coordinator took over")
		return
	}
	c.retryEngine("fenced: another coordinator took over")
}
