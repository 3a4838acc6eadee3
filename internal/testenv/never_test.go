package testenv

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that records failures instead of failing the test running it.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) { r.errors = append(r.errors, format) }

// Never asks its condition in the caller's goroutine until the time is up: when it returns, no
// ask is running, and a condition that became true fails the test with the message given.
func TestNeverReturnsWithNoAskUnderWay(t *testing.T) {
	var running, asks atomic.Int32
	slow := func() bool {
		running.Add(1)
		defer running.Add(-1)
		asks.Add(1)
		time.Sleep(30 * time.Millisecond)
		return false
	}
	r := &recorder{TB: t}
	assert.True(t, Never(r, slow, 100*time.Millisecond, 10*time.Millisecond))
	assert.Zero(t, running.Load(), "an ask still running after Never returned")
	assert.GreaterOrEqual(t, asks.Load(), int32(3), "asked until the time was up")
	assert.Empty(t, r.errors)

	n := 0
	assert.False(t, Never(r, func() bool { n++; return n == 3 }, time.Second, time.Millisecond, "node %s", "a"))
	assert.Equal(t, 3, n, "stops at the first true")
	assert.Len(t, r.errors, 1)
}
