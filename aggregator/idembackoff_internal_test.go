package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// TestIdempotencyDuplicateBacksOffWithoutWatch: a duplicate whose bucket
// cannot be watched reads the record after pauses that grow, not in a
// loop, until its deadline; the watch is tried again with backoff too.
// Time is the test's: nothing sleeps.
func TestIdempotencyDuplicateBacksOffWithoutWatch(t *testing.T) {
	b := newIdemBench(t)
	b.kv.broken = true
	clk := newFakeIdemClock(time.Now())
	b.kv.at = clk.now
	store := &IdempotencyStore{clock: clk}
	a := b.agg(t, store)
	ctx := context.Background()

	first := make(chan schema.Response, 1)
	go func() { first <- schema.Collect(ctx, a, keyed(`1`, "k", time.Minute))[0] }()
	<-b.entered
	ops := func() int64 { return b.kv.gets.Load() + b.kv.creates.Load() + b.kv.updates.Load() }
	before, gotsBefore := ops(), len(b.kv.stamps())

	const wait = 20 * time.Second
	start := clk.now()
	dup := make(chan schema.Response, 1)
	go func() { dup <- schema.Collect(ctx, a, keyed(`2`, "k", wait))[0] }()
	// The duplicate and the watch loop each wait on a timer: the time
	// moves on only when both do, so that neither runs ahead of the
	// other.
	var r schema.Response
	for waiting := true; waiting; {
		select {
		case r = <-dup:
			waiting = false
		case <-clk.armed:
			if clk.pending() < 2 {
				continue
			}
			clk.fire()
			if clk.now().Sub(start) > time.Hour {
				t.Fatalf("the duplicate was still waiting an hour after it came, with a deadline of 20s (asked %v, gets %d creates %d)", clk.durations(), b.kv.gets.Load(), b.kv.creates.Load())
			}
		}
	}
	spent, dupOps := clk.now().Sub(start), ops()-before

	close(b.release)
	if f := <-first; f.Error != nil || string(f.Result) != `"held"` {
		t.Errorf("the first call = %s %v, want \"held\"", f.Result, f.Error)
	}
	t.Cleanup(func() { store.waits(b.kv).stopIdle() })

	if r.Error == nil || r.Error.Code != schema.CodeTimeout {
		t.Fatalf("the duplicate = %s %v, want -32001 at its deadline", r.Result, r.Error)
	}
	if spent < wait {
		t.Errorf("the duplicate gave up after %v, want its deadline, %v", spent, wait)
	}
	t.Logf("in %v the duplicate made %d gets, creates and updates; the watch was tried %d times", spent, dupOps, b.kv.watches.Load())
	// Pauses of 50ms doubling to 2s read the record about 15 times in
	// 20s; a loop reads it thousands of times.
	if dupOps < 5 || dupOps > 40 {
		t.Errorf("the duplicate made %d gets, creates and updates in %v, want 5 to 40", dupOps, wait)
	}
	stamps := b.kv.stamps()[gotsBefore:]
	for i := 1; i < len(stamps); i++ {
		if gap := stamps[i].Sub(stamps[i-1]); gap < idemPollMin/2 {
			t.Errorf("get %d came %v after the one before, want a pause of at least %v", i, gap, idemPollMin/2)
		}
	}
	for _, d := range clk.durations() {
		if d > idemWatchRetryMax {
			t.Errorf("a pause of %v, want at most %v", d, idemWatchRetryMax)
		}
	}
	if n := b.kv.watches.Load(); n < 2 || n > 20 {
		t.Errorf("%d attempts at a watch in %v, want a few, made again with backoff", n, wait)
	}
}
