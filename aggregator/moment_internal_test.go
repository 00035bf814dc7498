package aggregator

import (
	"math"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// momentTimes are times moments are made of: the real clock's, with a
// monotonic reading, and times without one, such as a test's clock's,
// which may come before the epoch.
var momentTimes = []struct {
	name string
	t    time.Time
}{
	{"now", time.Now()},
	{"an hour ago", time.Now().Add(-time.Hour)},
	{"a test clock", newClock().now()},
	{"a wall clock reading", time.Unix(0, time.Now().UnixNano())},
}

// TestMomentRoundTrip: a time made a moment and read back on the clock
// of a time before it is the same instant, with the same wall reading,
// so the deadline a worker is told does not change.
func TestMomentRoundTrip(t *testing.T) {
	for _, tc := range momentTimes {
		t.Run(tc.name, func(t *testing.T) {
			anchor := tc.t.Add(-7 * time.Second)
			got := momentOf(tc.t).on(anchor)
			if !got.Equal(tc.t) {
				t.Errorf("momentOf(%v).on(%v) = %v, want %v", tc.t, anchor, got, tc.t)
			}
			if g, w := schema.FormatDeadline(got), schema.FormatDeadline(tc.t); g != w {
				t.Errorf("FormatDeadline(momentOf(%v).on(%v)) = %s, want %s", tc.t, anchor, g, w)
			}
			if g, w := momentOf(tc.t).on(tc.t), tc.t; !g.Equal(w) {
				t.Errorf("momentOf(%v).on itself = %v, want %v", tc.t, g, w)
			}
		})
	}
}

// TestMomentZeroIsUnset: no instant is the zero moment, not the epoch
// itself, with or without its monotonic reading, nor one reached by
// adding a duration.
func TestMomentZeroIsUnset(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  moment
	}{
		{"the epoch", momentOf(epoch)},
		{"the epoch's wall reading", momentOf(epoch.Round(0))},
		{"a moment added up to the epoch", momentOf(epoch.Add(-time.Second)).add(time.Second)},
		{"a test clock's time", momentOf(newClock().now())},
	} {
		if tc.got == 0 {
			t.Errorf("%s: moment = 0, want one that is set", tc.name)
		}
	}
}

// TestMomentOrder: moments order and subtract as their times do, and
// adding a duration to a moment is the moment of the time it is added
// to.
func TestMomentOrder(t *testing.T) {
	for _, tc := range momentTimes {
		t.Run(tc.name, func(t *testing.T) {
			early, late := tc.t, tc.t.Add(1500*time.Millisecond)
			if a, b := momentOf(early), momentOf(late); !(a < b) || b < a || a == b {
				t.Errorf("momentOf(%v) = %d, momentOf(%v) = %d, want the first before the second", early, a, late, b)
			}
			if got, want := momentOf(late).sub(momentOf(early)), late.Sub(early); got != want {
				t.Errorf("sub = %v, want %v", got, want)
			}
			if got, want := momentOf(early).add(1500*time.Millisecond), momentOf(late); got != want {
				t.Errorf("momentOf(%v).add(1.5s) = %d, want %d", early, got, want)
			}
		})
	}
}

// TestMomentSaturates: adding or subtracting past a moment's range stops
// at its end, as time.Time does, rather than wrapping round: a timer set
// "never" (the longest Duration) from now is not due at once.
func TestMomentSaturates(t *testing.T) {
	now := momentOf(time.Now())
	if got := now.add(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("now.add(MaxInt64) = %d, want MaxInt64", got)
	}
	if got := now.add(math.MaxInt64); got < now {
		t.Errorf("now.add(MaxInt64) = %d, before now %d", got, now)
	}
	if got := moment(-5).add(math.MinInt64); got != math.MinInt64 {
		t.Errorf("(-5).add(MinInt64) = %d, want MinInt64", got)
	}
	if got := moment(math.MaxInt64).sub(-5); got != math.MaxInt64 {
		t.Errorf("MaxInt64.sub(-5) = %v, want the longest Duration", got)
	}
	if got := moment(math.MinInt64).sub(5); got != math.MinInt64 {
		t.Errorf("MinInt64.sub(5) = %v, want the most negative Duration", got)
	}
	if got := moment(10).sub(3); got != 7 {
		t.Errorf("10.sub(3) = %v, want 7ns", got)
	}
}
