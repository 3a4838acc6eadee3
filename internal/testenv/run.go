package testenv

import (
	"context"
	"testing"
)

// RunUntilCleanup runs run in the background with a context that ends when the test ends, and
// then requires that run returned no error.
func RunUntilCleanup(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopped with an error: %v", err)
		}
	})
}
