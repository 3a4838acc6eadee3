package ratelog

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newFake(burst int, interval time.Duration) (*Limiter, *fakeClock) {
	c := &fakeClock{now: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}
	return New(Config{Burst: burst, Interval: interval, Now: c.Now}), c
}

// step is one call of Allow at a moment of the fake clock.
type step struct {
	after      time.Duration // advance the clock by this much first
	site       string
	ok         bool
	suppressed uint64
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name     string
		burst    int
		interval time.Duration
		steps    []step
	}{
		{"a burst, then held back until a share is earned", 3, 3 * time.Second, []step{
			{0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0},
			{0, "a", false, 0}, {999 * time.Millisecond, "a", false, 0},
			{time.Millisecond, "a", true, 2}, // one line per second earned back; two were held back
			{0, "a", false, 0},
			{time.Second, "a", true, 1},
		}},
		{"sites are independent", 1, time.Minute, []step{
			{0, "a", true, 0}, {0, "a", false, 0}, {0, "b", true, 0}, {0, "b", false, 0},
			{time.Minute, "a", true, 1}, {0, "b", true, 1},
		}},
		{"an idle site earns back no more than a burst", 2, time.Second, []step{
			{0, "a", true, 0}, {0, "a", true, 0},
			{time.Hour, "a", true, 0}, {0, "a", true, 0}, {0, "a", false, 0},
		}},
		{"a clock going back earns nothing", 1, time.Second, []step{
			{0, "a", true, 0}, {-time.Hour, "a", false, 0}, {time.Hour, "a", false, 0},
			{time.Second, "a", true, 2},
		}},
		{"zero burst and interval: the defaults", 0, 0, []step{
			{0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0}, {0, "a", true, 0},
			{0, "a", false, 0},
			{DefaultInterval / DefaultBurst, "a", true, 1},
		}},
		{"negative burst: nothing is logged", -1, time.Second, []step{
			{0, "a", false, 0}, {time.Hour, "a", false, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock := newFake(tt.burst, tt.interval)
			for i, s := range tt.steps {
				clock.advance(s.after)
				ok, suppressed := l.Allow(s.site)
				assert.Equal(t, s.ok, ok, "step %d: allowed", i)
				assert.Equal(t, s.suppressed, suppressed, "step %d: suppressed", i)
			}
		})
	}
}

// A flood logs a handful of lines, each saying how many were held back before it; together they
// account for every call.
func TestLoggerFlood(t *testing.T) {
	l, clock := newFake(5, time.Minute)
	log, hook := test.NewNullLogger()
	const calls = 10_000
	for range calls {
		clock.advance(10 * time.Millisecond) // 100 s in all
		l.Logger("decode", log).WithField("key", "k").Warn("ignoring a value that does not decode")
	}
	entries := hook.AllEntries()
	// 5 at once, then one per 12 s of the 100 s.
	require.Len(t, entries, 5+8)
	var logged, held uint64
	for i, e := range entries {
		assert.Equal(t, "ignoring a value that does not decode", e.Message)
		assert.Equal(t, "k", e.Data["key"])
		if i < 5 {
			assert.NotContains(t, e.Data, SuppressedField, "the first burst held nothing back")
		} else {
			held += e.Data[SuppressedField].(uint64)
		}
		logged++
	}
	clock.advance(time.Minute)
	_, pending := l.Allow("decode") // what the next line reports: those held back after the last
	assert.Equal(t, uint64(calls), logged+held+pending, "every call is logged or counted as held back")
}

func TestZeroLimiterUsesDefaults(t *testing.T) {
	var l Limiter
	for range DefaultBurst {
		ok, _ := l.Allow("a")
		require.True(t, ok)
	}
	ok, _ := l.Allow("a")
	assert.False(t, ok)
}

// The records stay bounded however many sites a caller invents; the extra ones share one.
func TestSitesAreBounded(t *testing.T) {
	l, _ := newFake(1, time.Hour)
	for i := range MaxSites - 1 {
		ok, _ := l.Allow(fmt.Sprint("site-", i))
		require.True(t, ok)
	}
	ok, _ := l.Allow("one more")
	assert.True(t, ok, "the first site beyond the bound takes the shared record")
	ok, _ = l.Allow("and another")
	assert.False(t, ok, "it shares the first one's budget")
	assert.Equal(t, MaxSites, len(l.sites))
}

func TestConcurrentUse(t *testing.T) {
	l, _ := newFake(10, time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if ok, _ := l.Allow("a"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 10, allowed)
}

func TestDiscardedLinesReachNoOutput(t *testing.T) {
	l, _ := newFake(1, time.Hour)
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	l.Logger("a", log).Warn("first")
	l.Logger("a", log).WithError(fmt.Errorf("boom")).Warnf("second %d", 2)
	l.Logger("a", log).Debug("third")
	require.Len(t, hook.AllEntries(), 1)
	assert.Equal(t, "first", hook.LastEntry().Message)
}
