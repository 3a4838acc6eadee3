package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Clock is a wall-clock time of day in minutes after midnight, 0..1439.
type Clock int

// MinutesPerDay is the number of Clock values in a day.
const MinutesPerDay = 24 * 60

// ParseClock parses a 24-hour "HH:MM" (00:00..23:59; one-digit hours allowed).
func ParseClock(s string) (Clock, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not a time of day (want HH:MM, 24-hour)", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 || h[0] == '+' || m[0] == '+' {
		return 0, fmt.Errorf("%q is not a time of day (want HH:MM, 24-hour, 00:00..23:59)", s)
	}
	return Clock(hh*60 + mm), nil
}

// String returns the time as "HH:MM".
func (c Clock) String() string { return fmt.Sprintf("%02d:%02d", int(c)/60, int(c)%60) }

// weekOrder lists the weekdays Monday first, the order Window.Days and String use.
var weekOrder = [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}

// ParseWeekday parses an English weekday name, full or three-letter, case-insensitive.
func ParseWeekday(s string) (time.Weekday, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, d := range weekOrder {
		full := strings.ToLower(d.String())
		if t == full || t == full[:3] {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%q is not a weekday (want Mon..Sun or Monday..Sunday)", s)
}

// Window is a weekly maintenance window: on each of Days it opens at Start and closes at the
// next End, both wall-clock times in Location. An End at or before Start closes on the next
// day (the window crosses midnight; Days name the day it opens), so Start == End is a whole
// day. The zero Window, like one with Always set, is always open.
//
// Daylight saving: a Start or End that the clocks skip (they go forward) moves forward by the
// length of the skip (02:30 becomes 03:30 when 02:00..03:00 is skipped); one the clocks show
// twice (they go back) means its first occurrence. A window that the skip leaves empty (say
// 02:15-02:45) does not open that day.
type Window struct {
	// Always is true for a window without restrictions: an empty window in the policy, no
	// window at all, or one open all day on every day.
	Always bool
	// Days are the weekdays on which the window opens, Monday first, each once; empty: every day.
	Days []time.Weekday
	// Start is when the window opens.
	Start Clock
	// End is when it closes: the same day if after Start, else the next day.
	End Clock
	// Location is the time zone of Start, End and Days; nil: UTC.
	Location *time.Location
}

// AlwaysOpen is the window without restrictions.
var AlwaysOpen = Window{Always: true}

// always reports whether w never closes: Always, or a whole day on every day.
func (w Window) always() bool { return w.Always || (len(w.Days) == 0 && w.Start == w.End) }

func (w Window) location() *time.Location {
	if w.Location == nil {
		return time.UTC
	}
	return w.Location
}

func (w Window) opensOn(d time.Weekday) bool {
	if len(w.Days) == 0 {
		return true
	}
	for _, x := range w.Days {
		if x == d {
			return true
		}
	}
	return false
}

// lookahead is how many days after today Open searches for the next opening: two weeks, so
// that a window the clocks' change empties this week still has a next opening.
const lookahead = 14

// Open reports whether the window is open at now. When it is closed, next is the next moment
// it opens (a later instant, in the window's Location); when it is open, next is now.
func (w Window) Open(now time.Time) (open bool, next time.Time) {
	if w.always() {
		return true, now
	}
	loc := w.location()
	y, m, d := now.In(loc).Date()
	// An opening at most one day back may still be open (windows are at most a day long);
	// the next one is at most a week ahead, two when the clocks' change empties one.
	for k := -1; k <= lookahead; k++ {
		day := time.Date(y, m, d+k, 0, 0, 0, 0, time.UTC) // the civil date; its weekday
		if !w.opensOn(day.Weekday()) {
			continue
		}
		from, to := w.interval(day, loc)
		if !to.After(from) {
			continue // emptied by the clocks going forward
		}
		if !now.Before(from) && now.Before(to) {
			return true, now
		}
		if from.After(now) && (next.IsZero() || from.Before(next)) {
			next = from
		}
	}
	return false, next
}

// interval returns the instants at which the window opening on the civil date day (its UTC
// midnight) opens and closes.
func (w Window) interval(day time.Time, loc *time.Location) (from, to time.Time) {
	from = wallTime(day, w.Start, loc)
	endDay := day
	if w.End <= w.Start {
		endDay = day.AddDate(0, 0, 1)
	}
	return from, wallTime(endDay, w.End, loc)
}

// wallTime returns the first instant at which the clocks in loc show c on the civil date day
// (its UTC midnight); a time the clocks skip moves forward by the skip.
func wallTime(day time.Time, c Clock, loc *time.Location) time.Time {
	y, m, d := day.Date()
	hh, mm := int(c)/60, int(c)%60
	t := time.Date(y, m, d, hh, mm, 0, 0, loc)
	// In a skip, time.Date returns an instant showing a wall time off by the skip, later or
	// earlier depending on the zone's history; when earlier, move it forward by the skip.
	want := time.Date(y, m, d, hh, mm, 0, 0, time.UTC)
	l := t.In(loc)
	shown := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	if skip := want.Sub(shown); skip > 0 {
		return t.Add(skip)
	} else if skip < 0 {
		return t
	}
	// When the clocks go back the time shows twice and time.Date may pick the second; look
	// for an earlier instant showing the same wall time (tz shifts are 30 min to 2 h).
	for _, back := range []time.Duration{2 * time.Hour, time.Hour, 30 * time.Minute} {
		e := t.Add(-back).In(loc)
		if ey, em, ed := e.Date(); ey == y && em == m && ed == d && e.Hour() == hh && e.Minute() == mm {
			return e
		}
	}
	return t
}

// String describes the window, e.g. "Mon-Fri 22:00-04:00 Europe/Berlin", "Sat,Sun all day UTC"
// or "always".
func (w Window) String() string {
	if w.always() {
		return "always"
	}
	var parts []string
	if len(w.Days) > 0 {
		parts = append(parts, formatDays(w.Days))
	}
	if w.Start == 0 && w.End == 0 {
		parts = append(parts, "all day")
	} else {
		parts = append(parts, w.Start.String()+"-"+w.End.String())
	}
	return strings.Join(append(parts, w.location().String()), " ")
}

// formatDays writes days Monday first, runs of three or more as ranges: "Mon-Fri", "Sat,Sun".
func formatDays(days []time.Weekday) string {
	var on [7]bool
	for _, d := range days {
		on[(int(d)+6)%7] = true // Monday = 0
	}
	var out []string
	for i := 0; i < 7; {
		if !on[i] {
			i++
			continue
		}
		j := i
		for j+1 < 7 && on[j+1] {
			j++
		}
		name := func(k int) string { return weekOrder[k].String()[:3] }
		switch {
		case j-i >= 2:
			out = append(out, name(i)+"-"+name(j))
		case j > i:
			out = append(out, name(i), name(j))
		default:
			out = append(out, name(i))
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// normalizeDays returns days Monday first without repeats; nil when empty or all seven.
func normalizeDays(days []time.Weekday) []time.Weekday {
	var on [7]bool
	for _, d := range days {
		on[(int(d)+6)%7] = true
	}
	var out []time.Weekday
	for i, d := range weekOrder {
		if on[i] {
			out = append(out, d)
		}
	}
	if len(out) == 7 {
		return nil
	}
	return out
}
