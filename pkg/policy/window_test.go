package policy

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// at parses an RFC 3339 instant.
func at(t testing.TB, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return tm
}

func clk(t testing.TB, s string) Clock {
	t.Helper()
	c, err := ParseClock(s)
	require.NoError(t, err)
	return c
}

func TestParseClock(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Clock
		str  string // String of the result; "": in
		err  bool
	}{
		{in: "00:00", want: 0},
		{in: "22:00", want: 22 * 60},
		{in: "23:59", want: MinutesPerDay - 1},
		{in: "9:05", want: 9*60 + 5, str: "09:05"},
		{in: "24:00", err: true},
		{in: "12:60", err: true},
		{in: "12", err: true},
		{in: "12:5", err: true},
		{in: "+1:00", err: true},
		{in: "-1:00", err: true},
		{in: "1:+5", err: true},
		{in: "", err: true},
		{in: "12:00:00", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseClock(tc.in)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.str == "" {
				tc.str = tc.in
			}
			assert.Equal(t, tc.str, got.String())
		})
	}
}

func TestParseWeekday(t *testing.T) {
	for in, want := range map[string]time.Weekday{"Mon": time.Monday, "monday": time.Monday, "SUN": time.Sunday, "Saturday": time.Saturday, " tue ": time.Tuesday} {
		t.Run(in, func(t *testing.T) {
			got, err := ParseWeekday(in)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	for _, in := range []string{"", "Mo", "Mond", "1", "Sonntag"} {
		t.Run("bad "+in, func(t *testing.T) {
			_, err := ParseWeekday(in)
			require.Error(t, err)
		})
	}
}

func TestWindowOpen(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	weekdaysNight := Window{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		Start: clk(t, "22:00"), End: clk(t, "04:00"), Location: berlin}
	daily := func(start, end string, loc *time.Location) Window {
		return Window{Start: clk(t, start), End: clk(t, end), Location: loc}
	}
	on := func(w Window, days ...time.Weekday) Window { w.Days = days; return w }
	for _, tc := range []struct {
		name string
		w    Window
		now  string
		open bool
		next string // when closed
	}{
		// 2026-06-01 is a Monday; Berlin is on CEST (+02:00).
		{name: "midnight crossing: open on the opening evening", w: weekdaysNight, now: "2026-06-01T23:00:00+02:00", open: true},
		{name: "midnight crossing: open the next morning", w: weekdaysNight, now: "2026-06-02T03:59:59+02:00", open: true},
		{name: "midnight crossing: Friday's window runs into Saturday", w: weekdaysNight, now: "2026-06-06T02:00:00+02:00", open: true},
		{name: "opens at start exactly", w: weekdaysNight, now: "2026-06-03T22:00:00+02:00", open: true},
		{name: "closed at end exactly", w: weekdaysNight, now: "2026-06-03T04:00:00+02:00", next: "2026-06-03T22:00:00+02:00"},
		{name: "Saturday evening: next is Monday", w: weekdaysNight, now: "2026-06-06T23:00:00+02:00", next: "2026-06-08T22:00:00+02:00"},
		{name: "Monday morning: Sunday opened none", w: weekdaysNight, now: "2026-06-01T03:00:00+02:00", next: "2026-06-01T22:00:00+02:00"},
		{name: "now given in another zone", w: weekdaysNight, now: "2026-06-01T20:30:00Z", open: true},
		{name: "now in another zone, closed", w: weekdaysNight, now: "2026-06-01T19:59:00Z", next: "2026-06-01T20:00:00Z"},
		{name: "only Mondays: next is next week", w: on(daily("10:00", "11:00", nil), time.Monday), now: "2026-06-01T11:00:00Z", next: "2026-06-08T10:00:00Z"},
		{name: "Sunday night into Monday", w: on(daily("23:00", "01:00", nil), time.Sunday), now: "2026-06-01T00:30:00Z", open: true},
		{name: "empty days: every day", w: daily("09:00", "17:00", mustZone(t, "America/New_York")), now: "2026-06-06T12:00:00-04:00", open: true},
		{name: "empty days: closed until the next morning", w: daily("09:00", "17:00", mustZone(t, "America/New_York")), now: "2026-06-06T17:00:00-04:00", next: "2026-06-07T09:00:00-04:00"},
		{name: "start==end: the whole day", w: on(daily("00:00", "00:00", nil), time.Wednesday), now: "2026-06-03T23:59:59Z", open: true},
		{name: "start==end: closed after the day", w: on(daily("00:00", "00:00", nil), time.Wednesday), now: "2026-06-04T00:00:00Z", next: "2026-06-10T00:00:00Z"},
		{name: "start==end at 22:00: 24 hours from the evening", w: on(daily("22:00", "22:00", nil), time.Monday), now: "2026-06-02T21:59:00Z", open: true},
		{name: "zero Window: always", w: Window{}, now: "2026-06-02T21:59:00Z", open: true},
		{name: "Always", w: AlwaysOpen, now: "2026-06-02T21:59:00Z", open: true},
		{name: "no days and start==end: always", w: daily("05:00", "05:00", berlin), now: "2026-06-02T21:59:00Z", open: true},

		// Spring forward: Sunday 2026-03-29 02:00 CET becomes 03:00 CEST in Berlin.
		{name: "spring: a window across the change is an hour shorter", w: daily("01:00", "05:00", berlin), now: "2026-03-29T02:59:00Z", open: true},
		{name: "spring: closed at 05:00 CEST", w: daily("01:00", "05:00", berlin), now: "2026-03-29T03:00:00Z", next: "2026-03-30T01:00:00+02:00"},
		{name: "spring: a start the clocks skip moves forward by the skip", w: daily("02:30", "04:00", berlin), now: "2026-03-29T01:00:00Z", next: "2026-03-29T03:30:00+02:00"},
		{name: "spring: a window the skip empties does not open; next week's does", w: on(daily("02:30", "03:30", berlin), time.Sunday), now: "2026-03-28T12:00:00Z", next: "2026-04-05T02:30:00+02:00"},
		{name: "spring: a whole day across the change lasts 23 hours", w: on(daily("22:00", "22:00", berlin), time.Saturday), now: "2026-03-29T19:59:00Z", open: true},
		{name: "spring: ... and ends at 22:00 CEST", w: on(daily("22:00", "22:00", berlin), time.Saturday), now: "2026-03-29T20:00:00Z", next: "2026-04-04T22:00:00+02:00"},
		// Fall back: Sunday 2026-10-25 03:00 CEST becomes 02:00 CET; 02:00-03:00 shows twice.
		{name: "fall: a start shown twice means its first occurrence", w: daily("02:30", "04:00", berlin), now: "2026-10-25T00:45:00Z", open: true},
		{name: "fall: ... and before it the window is closed", w: daily("02:30", "04:00", berlin), now: "2026-10-25T00:29:00Z", next: "2026-10-25T02:30:00+02:00"},
		{name: "fall: an end shown twice means its first occurrence", w: daily("01:00", "02:30", berlin), now: "2026-10-25T00:30:00Z", next: "2026-10-26T01:00:00+01:00"},
		{name: "fall: a window across the change is an hour longer", w: daily("01:00", "05:00", berlin), now: "2026-10-25T03:59:00Z", open: true},
		{name: "fall: closed at 05:00 CET", w: daily("01:00", "05:00", berlin), now: "2026-10-25T04:00:00Z", next: "2026-10-26T01:00:00+01:00"},
		// Lord Howe Island shifts by 30 minutes: 2026-04-05 02:00 (+11) becomes 01:30 (+10:30).
		{name: "half-hour fall back: first occurrence", w: daily("01:45", "03:00", mustZone(t, "Australia/Lord_Howe")), now: "2026-04-04T14:50:00Z", open: true},
		{name: "half-hour fall back: closed before it", w: daily("01:45", "03:00", mustZone(t, "Australia/Lord_Howe")), now: "2026-04-04T14:40:00Z", next: "2026-04-05T01:45:00+11:00"},
		// Santiago springs forward at midnight: 2026-09-06 00:00 (-04) becomes 01:00 (-03).
		{name: "midnight skipped: opens after the skip", w: daily("00:00", "02:00", mustZone(t, "America/Santiago")), now: "2026-09-06T03:30:00Z", next: "2026-09-06T01:00:00-03:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at(t, tc.now)
			open, next := tc.w.Open(now)
			require.Equal(t, tc.open, open, "window %s at %s", tc.w, now.In(tc.w.location()))
			if tc.open {
				assert.True(t, next.Equal(now), "next when open is now, got %s", next)
				return
			}
			want := at(t, tc.next)
			assert.True(t, want.Equal(next), "next: want %s, got %s", want, next.In(tc.w.location()))
			assert.Equal(t, tc.w.location(), next.Location(), "next is in the window's zone")
		})
	}
}

func TestWindowString(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	for _, tc := range []struct {
		w    Window
		want string
	}{
		{Window{Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}, Start: 22 * 60, End: 4 * 60, Location: berlin}, "Mon-Fri 22:00-04:00 Europe/Berlin"},
		{Window{Days: []time.Weekday{time.Saturday, time.Sunday}, Start: 60, End: 5 * 60}, "Sat,Sun 01:00-05:00 UTC"},
		{Window{Days: []time.Weekday{time.Monday, time.Wednesday, time.Thursday, time.Friday, time.Sunday}, Start: 60, End: 60}, "Mon,Wed-Fri,Sun 01:00-01:00 UTC"},
		{Window{Days: []time.Weekday{time.Saturday, time.Sunday}}, "Sat,Sun all day UTC"},
		{Window{Start: 9 * 60, End: 17 * 60, Location: berlin}, "09:00-17:00 Europe/Berlin"},
		{Window{}, "always"},
		{AlwaysOpen, "always"},
	} {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, tc.w.String()) })
	}
}

// Open and next agree: for random windows and instants (many near daylight saving changes),
// the window is open at next and closed just before it and at instants between now and next;
// an open window's next is now.
func TestWindowOpenAgreesWithNext(t *testing.T) {
	zones := []*time.Location{time.UTC, mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York"),
		mustZone(t, "Australia/Lord_Howe"), mustZone(t, "Australia/Sydney"), mustZone(t, "America/Santiago"),
		mustZone(t, "Asia/Kolkata"), mustZone(t, "Pacific/Apia")}
	// Instants around changes (Berlin spring and fall 2026, Lord Howe, Santiago, Sydney) and
	// anywhere in 2026.
	anchors := []time.Time{at(t, "2026-03-29T01:00:00Z"), at(t, "2026-10-25T01:00:00Z"), at(t, "2026-04-04T15:00:00Z"),
		at(t, "2026-09-06T04:00:00Z"), at(t, "2026-10-03T16:00:00Z"), at(t, "2026-03-08T07:00:00Z"), at(t, "2026-11-01T06:00:00Z")}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	n := 20000
	if testing.Short() {
		n = 500
	}
	for i := range n {
		w := Window{Location: zones[rng.IntN(len(zones))]}
		for _, d := range weekOrder {
			if rng.IntN(3) == 0 {
				w.Days = append(w.Days, d)
			}
		}
		w.Start = Clock(rng.IntN(MinutesPerDay))
		switch rng.IntN(4) {
		case 0:
			w.End = w.Start
		case 1:
			w.End = Clock((int(w.Start) + 30 + rng.IntN(120)) % MinutesPerDay)
		default:
			w.End = Clock(rng.IntN(MinutesPerDay))
		}
		var now time.Time
		if rng.IntN(2) == 0 {
			now = anchors[rng.IntN(len(anchors))].Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour)
		} else {
			now = at(t, "2026-01-01T00:00:00Z").Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		}
		now = now.Truncate(time.Minute).Add(time.Duration(rng.IntN(3)-1) * time.Nanosecond) // near minute boundaries too
		open, next := w.Open(now)
		if open {
			if !next.Equal(now) {
				t.Fatalf("case %d (seed %d): %s open at %s but next %s", i, seed, w, now, next)
			}
			continue
		}
		if !next.After(now) || next.Sub(now) > 15*24*time.Hour {
			t.Fatalf("case %d (seed %d): %s closed at %s, next %s not within two weeks after", i, seed, w, now.In(w.location()), next)
		}
		if ok, _ := w.Open(next); !ok {
			t.Fatalf("case %d (seed %d): %s not open at its next opening %s (now %s)", i, seed, w, next, now.In(w.location()))
		}
		if ok, _ := w.Open(next.Add(-time.Nanosecond)); ok {
			t.Fatalf("case %d (seed %d): %s already open just before its next opening %s", i, seed, w, next)
		}
		for range 4 {
			between := now.Add(time.Duration(rng.Int64N(int64(next.Sub(now)))))
			if ok, n2 := w.Open(between); ok || !n2.Equal(next) {
				t.Fatalf("case %d (seed %d): %s at %s between now %s and next %s: open %t, next %s", i, seed, w, between, now, next, ok, n2)
			}
		}
	}
}
