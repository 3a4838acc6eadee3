package testenv

import (
	"fmt"
	"testing"
	"time"
)

// Never reports whether cond stays false for waitFor, asking it every tick, and marks the test
// failed if it does not (as testify's assert.Never). Unlike testify's, it asks in the calling
// goroutine and returns only when no ask is under way: testify's returns when its timer fires
// and leaves an ask running, which then reads the cluster or the bus after the test has ended
// and its cleanup deleted what it reads (a test failed so: "nodes … not found"), and cannot
// call require.
func Never(t testing.TB, cond func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if cond() {
			t.Errorf("condition satisfied, which should never be: %s", message(msgAndArgs))
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		time.Sleep(min(tick, left))
	}
}

// RequireNever is Never that stops the test when cond is satisfied.
func RequireNever(t testing.TB, cond func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	if !Never(t, cond, waitFor, tick, msgAndArgs...) {
		t.FailNow()
	}
}

// message formats testify's msgAndArgs: a format and its arguments, or a single value.
func message(msgAndArgs []any) string {
	switch {
	case len(msgAndArgs) == 0:
		return ""
	case len(msgAndArgs) == 1:
		return fmt.Sprint(msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}
