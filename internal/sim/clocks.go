package sim

import (
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/edgedrain/edgedrain/pkg/nodedrain"
	"github.com/edgedrain/edgedrain/pkg/nodedrain/agent"
)

// Clock faults: every process reads its own machine's wall clock, and the times it
// writes (a request's RequestedAt, a status's StartedAt, UpdatedAt and ReturningSince, a Node
// condition's transition time) or reads (the kernel's boot time, a state file's times) are that
// clock's. Within a process Go measures durations on the monotonic clock (time.Now carries a
// reading): a step of the wall clock does not move a duration between two time.Now values of
// one process, but it moves every comparison with a time that was stored or crossed the wire.
// The model gives each process exactly that: an agent's now carries a monotonic reading (the
// simulated time) and its wall clock's reading; what it stores or sends has the wall reading
// only (stripped as encoding/json strips it). Coordinators' clocks are off by a constant.
const (
	// ClockStep: from At on, the node's clock is off by For (either sign): a bad NTP server, or
	// an NTP step while the agent runs.
	ClockStep Kind = "node-clock-step"
	// NoRTC: from At on, the node has no real-time clock: each boot starts its clock at the time
	// last saved (hourly, as fake-hwclock), and NTP sets it For after the boot.
	NoRTC Kind = "node-without-rtc"
	// NoRTCFarPast: as NoRTC, but the clock starts far in the past (no saved time at all).
	NoRTCFarPast Kind = "node-without-rtc-far-past"
	// CoordClockSkew: coordinator replica Target's clock is off by For (either sign).
	CoordClockSkew Kind = "coordinator-clock-skew"
	// ControlPlaneSkew: the node lifecycle controller's clock (the Ready condition's transition
	// times, NotReadySince) is off by For (either sign).
	ControlPlaneSkew Kind = "control-plane-clock-skew"
)

// farPast is where a clock without a real-time clock nor a saved time starts.
var farPast = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

var clockKinds = []weightedKind{{ClockStep, 4}, {NoRTC, 3}, {NoRTCFarPast, 2}, {CoordClockSkew, 3}, {ControlPlaneSkew, 2}}

// clockFaults draws one to three clock faults for a run (cfg.Clocks).
func clockFaults(cfg Config, rng *rand.Rand, at func() time.Duration) Plan {
	var p Plan
	for range 1 + rng.IntN(3) {
		k := drawKind(clockKinds, rng)
		skew := time.Duration(1+rng.IntN(59)) * time.Second
		if rng.IntN(2) == 0 {
			skew = time.Duration(60+rng.IntN(540)) * time.Second
		}
		if rng.IntN(2) == 0 {
			skew = -skew
		}
		f := Fault{Kind: k, Target: rng.IntN(cfg.Nodes), For: skew}
		switch k {
		case ClockStep:
			if rng.IntN(2) == 0 {
				f.At = at()
			}
		case NoRTC, NoRTCFarPast:
			f.For = time.Duration(5+rng.IntN(300)) * time.Second // NTP syncs this long after a boot
		case CoordClockSkew:
			f.Target = rng.IntN(cfg.Coordinators)
		}
		p = append(p, f)
	}
	return p
}

// nodeClock is a node's wall clock.
type nodeClock struct {
	// offset is the clock's error once NTP set it.
	offset time.Duration
	// noRTC: each boot starts the clock wrong (at the last saved time, or farPast) until NTP
	// sets it syncAfter later.
	noRTC, farPast bool
	syncAfter      time.Duration
	// boot is the boot the fields below describe; until syncAt the clock reads bootWall plus
	// the time since the boot.
	boot     int
	syncAt   time.Time
	bootWall time.Time
	// last is the last wall reading, saved is what fake-hwclock saved last (hourly).
	last time.Time
}

// clockOf returns a node's clock.
func (s *Sim) clockOf(n *node) *nodeClock {
	if s.clocks == nil {
		s.clocks = map[string]*nodeClock{}
	}
	c, ok := s.clocks[n.name]
	if !ok {
		c = &nodeClock{boot: n.bootID}
		s.clocks[n.name] = c
	}
	return c
}

// wall is what the node's clock reads now.
func (s *Sim) wall(n *node) time.Time {
	c := s.clockOf(n)
	now := s.w.now
	if c.boot != n.bootID {
		c.boot = n.bootID
		c.syncAt = time.Time{}
		if c.noRTC {
			c.syncAt = n.bootAt.Add(c.syncAfter)
			c.bootWall = c.last.Truncate(time.Hour) // fake-hwclock's last hourly save
			if c.farPast || c.last.IsZero() {
				c.bootWall = farPast
			}
			s.w.logf("%s boots without a real-time clock: its clock starts at %s, NTP sets it in %s",
				n.name, c.bootWall.Format(time.RFC3339), c.syncAfter)
		}
	}
	w := now.Add(c.offset)
	if !c.syncAt.IsZero() && now.Before(c.syncAt) {
		w = c.bootWall.Add(now.Sub(n.bootAt))
	}
	c.last = w
	return w
}

// agentNow is what time.Now returns in the node's agent: its wall clock's reading with a
// monotonic reading (the simulated time: durations within the process are true).
func (s *Sim) agentNow(n *node) time.Time {
	return withMonotonic(s.wall(n), s.w.now.Sub(epoch)+24*time.Hour)
}

// bootTime is the kernel's btime as the agent reads it: the clock now less the time since the
// boot, in whole seconds (it moves with the clock).
func (s *Sim) bootTime(n *node) time.Time {
	return time.Unix(s.wall(n).Add(-s.w.now.Sub(n.bootAt)).Unix(), 0)
}

// now is what time.Now returns in the coordinator replica (its offset is constant: no
// monotonic reading is needed).
func (c *coord) now() time.Time { return c.s.w.now.Add(c.offset) }

// local is the simulated time t on the coordinator's clock.
func (c *coord) local(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(c.offset)
}

// notReadySince is the node's NotReadySince as the node lifecycle controller wrote it.
func (s *Sim) notReadySinceOf(name string) time.Time {
	t, ok := s.notReadySince[name]
	if !ok {
		return time.Time{}
	}
	return t.Add(s.cpOffset) // (a Node condition's time has whole seconds)
}

// noteClock records the true times of the times a coordinator's status carries, and returns the
// status with its times made true for the checks, which judge decisions in simulated time. A
// time already recorded (StartedAt carried over by another replica's resume) keeps its record.
func (s *Sim) noteClock(c *coord, st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	if s.truth == nil {
		s.truth = map[int64]time.Time{}
	}
	conv := func(t *time.Time) {
		if t.IsZero() {
			return
		}
		k := t.UnixNano()
		if tt, ok := s.truth[k]; ok {
			*t = tt
			return
		}
		tt := t.Add(-c.offset)
		s.truth[k] = tt
		*t = tt
	}
	conv(&st.StartedAt)
	conv(&st.UpdatedAt)
	conv(&st.ReturningSince)
	return st
}

// trueTimes is st with its times made true from the records (see noteClock).
func (s *Sim) trueTimes(st nodedrain.NodeDrainStatus) nodedrain.NodeDrainStatus {
	for _, t := range []*time.Time{&st.StartedAt, &st.UpdatedAt, &st.ReturningSince} {
		if tt, ok := s.truth[t.UnixNano()]; ok && !t.IsZero() {
			*t = tt
		}
	}
	return st
}

// wallOnly is st as a state file gives it back: its times without monotonic readings.
func wallOnly(st agent.State) agent.State {
	for _, t := range []*time.Time{&st.RequestedAt, &st.CommandStartedAt, &st.RetryAt, &st.CleanupBefore} {
		*t = t.Round(0)
	}
	return st
}

// applyClockFault makes a clock fault happen.
func (s *Sim) applyClockFault(f Fault) {
	switch f.Kind {
	case ClockStep:
		a := s.agents[f.Target%len(s.agents)]
		s.clockOf(a.node).offset = f.For
		s.w.logf("the clock of %s is off by %s from now on", a.node.name, f.For)
	case NoRTC, NoRTCFarPast:
		a := s.agents[f.Target%len(s.agents)]
		c := s.clockOf(a.node)
		c.noRTC, c.farPast, c.syncAfter = true, f.Kind == NoRTCFarPast, f.For
		s.w.logf("%s has no real-time clock from now on", a.node.name)
	case CoordClockSkew:
		c := s.coords[f.Target%len(s.coords)]
		c.offset = f.For
		s.w.logf("the clock of %s is off by %s from now on", c.name, f.For)
	case ControlPlaneSkew:
		s.cpOffset = f.For
		s.w.logf("the node lifecycle controller's clock is off by %s from now on", f.For)
	}
}

// withMonotonic returns wall with the monotonic reading mono, as time.Now would return it on a
// machine whose wall clock reads wall. Go gives no way to make such a value: it is built from
// the runtime's layout of time.Time (wall: hasMonotonic, 33 bits of seconds since 1885, 30 bits
// of nanoseconds; ext: the monotonic reading), which TestWithMonotonic checks.
func withMonotonic(wall time.Time, mono time.Duration) time.Time {
	const (
		hasMonotonic   = 1 << 63
		secondsPerDay  = 86400
		unixToInternal = (1969*365 + 1969/4 - 1969/100 + 1969/400) * secondsPerDay
		wallToInternal = (1884*365 + 1884/4 - 1884/100 + 1884/400) * secondsPerDay
	)
	sec := wall.Unix() + unixToInternal - wallToInternal
	if sec < 0 || sec >= 1<<33 {
		return wall
	}
	t := wall.UTC()
	r := (*struct {
		wall uint64
		ext  int64
		loc  *time.Location
	})(unsafe.Pointer(&t))
	r.wall = hasMonotonic | uint64(sec)<<30 | uint64(wall.Nanosecond())
	r.ext = int64(mono)
	return t
}
