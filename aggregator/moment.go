package aggregator

import "time"

// moment is an instant of the table's clock, counted in nanoseconds from
// [epoch]: a call keeps its deadline and its timers as moments, 8 bytes
// where a time.Time takes 24, as every call in flight holds eight of
// them. The zero moment is unset (a timer not armed): [momentOf] and
// [moment.add] never return it. Moments compare with < and ==, as the
// times they were made from do.
type moment int64

// epoch is the instant moments count from: the clock as the package was
// loaded, read with its monotonic reading, so that a time that has one
// (time.Now's) counts on the monotonic clock, as time.Time's own
// comparisons do, and is not moved when the wall clock is set. A time
// without one (a test's clock, a deadline read off the wire) counts by
// the wall clock from the epoch's wall reading; it may come before the
// epoch, a negative moment.
//
// It is state of the process, not of an aggregator, and it is read-only:
// every table counts from the same instant, and no table needs another.
var epoch = time.Now()

// momentOf returns the moment of t. An instant that falls on the epoch
// is moved a nanosecond on, as the zero moment is unset.
func momentOf(t time.Time) moment {
	return nonZero(moment(t.Sub(epoch)))
}

// add returns the moment d after m; never the zero moment.
func (m moment) add(d time.Duration) moment { return nonZero(m + moment(d)) }

// sub returns the time from o to m.
func (m moment) sub(o moment) time.Duration { return time.Duration(m - o) }

// on returns m as a time read on the clock of anchor: anchor moved on by
// the time from anchor's moment to m. Its wall reading is anchor's plus
// that time, so a deadline set from anchor shows the wall clock anchor
// was read on, as the time it was made from does, whether or not the
// wall clock was set since the epoch.
func (m moment) on(anchor time.Time) time.Time {
	return anchor.Add(m.sub(momentOf(anchor)))
}

func nonZero(m moment) moment {
	if m == 0 {
		return 1
	}
	return m
}
