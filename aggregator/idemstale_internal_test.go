package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// TestIdempotencyStaleRecordNotRunAgain: a record left running by an
// aggregator that could not finish it (it stopped, or the bucket was
// full) is waited for until its call's deadline and a grace have passed,
// and then answered -32006, the call may have run; it never runs again.
func TestIdempotencyStaleRecordNotRunAgain(t *testing.T) {
	tests := []struct {
		name       string
		until      time.Duration // the left record's deadline, from now
		wantCode   int
		wantReason string
	}{
		{name: "past the grace", until: -staleGrace - time.Second, wantCode: schema.CodeLimitExceeded,
			wantReason: schema.ReasonIdempotencyOutcomeUnknown},
		{name: "past its deadline, within the grace", until: -staleGrace + 3*time.Second, wantCode: schema.CodeTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newIdemBench(t)
			close(b.release)
			store := &IdempotencyStore{}
			a := b.agg(t, store)
			t.Cleanup(func() { store.waits(b.kv).stopIdle() })
			calls := keyed(`1`, "k", 200*time.Millisecond)
			left := runningRecord(fingerprint(&calls[0]), time.Now().Add(tc.until))
			if _, err := b.kv.Create(context.Background(), idemKey(&calls[0]), left); err != nil {
				t.Fatal(err)
			}
			r := schema.Collect(context.Background(), a, calls)[0]
			if n := b.runs.Load(); n != 0 {
				t.Errorf("the tool ran %d times, want 0", n)
			}
			if r.Error == nil || r.Error.Code != tc.wantCode || r.Error.Reason() != tc.wantReason {
				t.Errorf("the call = %s %v, want code %d, reason %q", r.Result, r.Error, tc.wantCode, tc.wantReason)
			}
		})
	}
}
