package aggregator

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// TestIdempotencyDuplicatesShareOneWatch: however many duplicates wait, on
// however many keys, an aggregator holds one consumer on the bucket's
// stream, and every duplicate gets the answer of the call it waits for.
func TestIdempotencyDuplicatesShareOneWatch(t *testing.T) {
	b := newIdemBench(t)
	store := &IdempotencyStore{}
	a := b.agg(t, store)
	ctx := context.Background()
	keys := []string{"k1", "k2"}
	firsts := make(chan schema.Response, len(keys))
	for _, k := range keys {
		go func() { firsts <- schema.Collect(ctx, a, keyed(`0`, k, time.Minute))[0] }()
		<-b.entered
	}

	const dups = 40
	answers := make(chan schema.Response, dups)
	for i := range dups {
		go func() {
			answers <- schema.Collect(ctx, a, keyed(fmt.Sprint(i+1), keys[i%len(keys)], time.Minute))[0]
		}()
	}
	// Each duplicate reads its record once it waits (or opens a watch of
	// its own, as duplicates once did).
	testwait.Eventually(t, func() bool { return max(b.kv.gets.Load(), b.kv.watches.Load()) >= dups },
		"every duplicate waits")
	testwait.Eventually(t, func() bool { return b.consumers(t) > 0 }, "the bucket is watched")
	if n := b.consumers(t); n != 1 {
		t.Errorf("%d duplicates waiting hold %d consumers on the bucket's stream, want 1", dups, n)
	}

	close(b.release)
	for range keys {
		if r := <-firsts; r.Error != nil {
			t.Errorf("a first call = %v, want its answer", r.Error)
		}
	}
	for range dups {
		if r := <-answers; r.Error != nil || string(r.Result) != `"held"` {
			t.Errorf("a duplicate = %s %v, want the first call's answer, \"held\"", r.Result, r.Error)
		}
	}
	if n := b.runs.Load(); n != int64(len(keys)) {
		t.Errorf("the tool ran %d times, want %d, once a key", n, len(keys))
	}
	t.Cleanup(func() { store.waits(b.kv).stopIdle() })
}

// TestIdempotencyStoreCloseStopsTheWatch: Close ends the watch at once,
// not after it idled, tells the duplicates waiting to read their records
// again, and no later duplicate starts one.
func TestIdempotencyStoreCloseStopsTheWatch(t *testing.T) {
	b := newIdemBench(t)
	store := &IdempotencyStore{}
	store.Open(b.kv)
	h := store.waits(b.kv)
	w := h.wait("k1", slog.New(slog.DiscardHandler))
	testwait.Eventually(t, func() bool { return b.consumers(t) == 1 && h.watching() }, "the bucket is watched")
	select {
	case <-w.changes: // the watch came up: read again
	default:
	}
	store.Close()
	testwait.Eventually(t, func() bool { return b.consumers(t) == 0 && !h.watching() }, "the watch ends at Close")
	// The waiter is told to read its record again, and reads at
	// intervals from then on, rather than waiting for a watch that is
	// gone until its deadline.
	select {
	case <-w.changes:
	default:
		t.Error("Close did not tell the waiting duplicate to read its record again")
	}
	w.stop()
	w2 := store.waits(b.kv).wait("k2", slog.New(slog.DiscardHandler))
	defer w2.stop()
	if h2 := store.waits(b.kv); h2.stop != nil {
		t.Errorf("a duplicate after Close started a watch, want none")
	}
}
