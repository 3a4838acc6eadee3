package sim

import (
	"testing"
	"time"
)

// TestWithMonotonic checks the model's time.Now of a process (withMonotonic): durations between
// its values are monotonic, while its wall reading is what is written and compared once stored.
func TestWithMonotonic(t *testing.T) {
	a := withMonotonic(epoch, time.Hour)
	b := withMonotonic(epoch.Add(-10*time.Minute), time.Hour+5*time.Second) // the clock stepped back
	if !a.Equal(epoch) && a.Round(0) != epoch {
		t.Fatalf("wall reading %v, want %v", a.Round(0), epoch)
	}
	if d := b.Sub(a); d != 5*time.Second {
		t.Fatalf("monotonic difference %s, want 5s", d)
	}
	if d := b.Round(0).Sub(a.Round(0)); d != -10*time.Minute+0 {
		t.Fatalf("wall difference %s, want -10m", d)
	}
	if got := b.Round(0); !got.Equal(epoch.Add(-10 * time.Minute)) {
		t.Fatalf("wall %v", got)
	}
	if got := b.Add(time.Second).Sub(a); got != 6*time.Second {
		t.Fatalf("Add keeps the monotonic reading: %s", got)
	}
	if s := a.Round(0).Format(time.RFC3339); s != "2026-01-01T00:00:00Z" {
		t.Fatalf("format %s", s)
	}
}
