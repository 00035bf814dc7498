package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// idemSetup starts a server with a bucket of maxBytes (0: the default)
// and a worker whose "count" tool counts its runs and answers size bytes.
func idemSetup(t *testing.T, maxBytes int64, size int) (ac *nats.Conn, kv jetstream.KeyValue, runs *atomic.Int64) {
	t.Helper()
	ac, wc := setup(t)
	js, err := jetstream.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	kv, err = aggregator.IdempotencyBucket(context.Background(), js, bus.DefaultSubjects(), time.Minute, 1, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	runs = &atomic.Int64{}
	answer := []byte(`"` + strings.Repeat("x", max(size-2, 0)) + `"`)
	serve(t, wc, "count", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		runs.Add(1)
		return schema.ReplyResult(answer)
	})
	return ac, kv, runs
}

// collectKeyed dispatches calls on d carrying the idempotency key k, as the
// ingress names them.
func collectKeyed(d schema.Dispatcher, k string, calls []schema.Call) []schema.Response {
	schema.SetIdempotencyKey(calls, k)
	return schema.Collect(context.Background(), d, calls)
}

// dataOf decodes an error's data.
func dataOf(t *testing.T, e *schema.Error) map[string]any {
	t.Helper()
	var d map[string]any
	if e == nil || json.Unmarshal(e.Data, &d) != nil {
		t.Fatalf("error %v has no data object", e)
	}
	return d
}

// fill writes junk into kv until it refuses even the smallest value.
func fill(t *testing.T, kv jetstream.KeyValue) {
	t.Helper()
	i := 0
	for _, size := range []int{512, 1} {
		for ; ; i++ {
			if i > 20_000 {
				t.Fatal("the bucket took 10 MB of junk: it has no byte cap")
			}
			if _, err := kv.Put(context.Background(), fmt.Sprintf("junk.%d", i), make([]byte, size)); err != nil {
				break
			}
		}
	}
}

// TestIdempotencyStoreFullRefuses: once the bucket is full, a call with a
// key is refused -32003 naming idempotency_max_bytes and does not run;
// fail-open runs it, as before.
func TestIdempotencyStoreFullRefuses(t *testing.T) {
	ac, kv, runs := idemSetup(t, 64<<10, 8)
	fill(t, kv)
	a := newAgg(t, ac, idemStore(t, kv))
	r := collectKeyed(a, "k", []schema.Call{callerCall(`1`, "count", "t")})[0]
	if !errors.Is(r.Error, schema.ErrUnavailable) {
		t.Fatalf("a call the full store cannot record = %+v, want -32003", r)
	}
	if d := dataOf(t, r.Error); d["reason"] != "idempotency_store_full" || d["limit"] != "idempotency_max_bytes" || d["retryable"] != true {
		t.Errorf("refusal data = %v, want reason idempotency_store_full, limit idempotency_max_bytes, retryable", d)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the refused call ran %d times, want 0", n)
	}

	open := newAgg(t, ac, idemStore(t, kv), aggregator.WithIdempotencyFailOpen(true))
	if r := collectKeyed(open, "k", []schema.Call{callerCall(`1`, "count", "t")})[0]; r.Error != nil || runs.Load() != 1 {
		t.Fatalf("fail-open: %+v after %d runs, want the call run once", r, runs.Load())
	}
}

// TestIdempotencyStoreUnavailableRefuses: a store that cannot be reached
// refuses the call rather than running it unprotected.
func TestIdempotencyStoreUnavailableRefuses(t *testing.T) {
	ac, kv, runs := idemSetup(t, 0, 8)
	js, _ := jetstream.New(ac)
	if err := js.DeleteKeyValue(context.Background(), kv.Bucket()); err != nil {
		t.Fatal(err)
	}
	a := newAgg(t, ac, idemStore(t, kv))
	for i := range 3 {
		r := collectKeyed(a, "k", []schema.Call{call(`1`, "count", "")})[0]
		if !errors.Is(r.Error, schema.ErrUnavailable) || dataOf(t, r.Error)["reason"] != "idempotency_store_unavailable" {
			t.Fatalf("try %d = %+v, want -32003 idempotency_store_unavailable", i, r)
		}
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the call ran %d times without its record, want 0", n)
	}
}

// TestIdempotencyAnswerNotKept: an answer too large for the room left is
// not kept, but a duplicate learns that the call ran instead of running it
// again.
func TestIdempotencyAnswerNotKept(t *testing.T) {
	ac, kv, runs := idemSetup(t, 16<<10, 32<<10)
	a := newAgg(t, ac, idemStore(t, kv))
	first := collectKeyed(a, "k", []schema.Call{call(`1`, "count", "")})[0]
	if first.Error != nil {
		t.Fatalf("first call = %v, want its answer", first.Error)
	}
	dup := collectKeyed(a, "k", []schema.Call{call(`1`, "count", "")})[0]
	if !errors.Is(dup.Error, schema.ErrLimitExceeded) || dataOf(t, dup.Error)["reason"] != "idempotency_answer_not_kept" {
		t.Fatalf("duplicate = %+v, want -32006 idempotency_answer_not_kept", dup)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("runs = %d, want 1", n)
	}
}

// TestIdempotencyCallerLimits: a caller at its number of records has its
// calls with new keys refused -32006 without running, while its old keys
// replay and other callers go on; the anonymous caller has no bound.
func TestIdempotencyCallerLimits(t *testing.T) {
	ac, kv, runs := idemSetup(t, 0, 8)
	a := newAgg(t, ac, idemStore(t, kv), aggregator.WithIdempotencyCallerLimits(2, 1<<20))
	for _, k := range []string{"k1", "k2"} {
		if r := collectKeyed(a, k, []schema.Call{callerCall(`1`, "count", "flood")})[0]; r.Error != nil {
			t.Fatalf("key %s: %v", k, r.Error)
		}
	}
	r := collectKeyed(a, "k3", []schema.Call{callerCall(`1`, "count", "flood")})[0]
	if !errors.Is(r.Error, schema.ErrLimitExceeded) {
		t.Fatalf("a third key = %+v, want -32006", r)
	}
	if d := dataOf(t, r.Error); d["limit"] != "idempotency_caller_max_records" || d["max"] != 2.0 || d["retry_after_ms"] == nil {
		t.Errorf("refusal data = %v, want limit idempotency_caller_max_records, max 2, retry_after_ms", d)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("runs = %d, want 2: the refused call must not run", n)
	}
	if r := collectKeyed(a, "k1", []schema.Call{callerCall(`1`, "count", "flood")})[0]; r.Error != nil || runs.Load() != 2 {
		t.Fatalf("an old key again = %+v after %d runs, want its replay", r, runs.Load())
	}
	if r := collectKeyed(a, "k3", []schema.Call{callerCall(`1`, "count", "quiet")})[0]; r.Error != nil {
		t.Fatalf("another caller's key = %v, want a result", r.Error)
	}
	for _, k := range []string{"a1", "a2", "a3"} {
		if r := collectKeyed(a, k, []schema.Call{call(`1`, "count", "")})[0]; r.Error != nil {
			t.Fatalf("anonymous key %s = %v, want a result", k, r.Error)
		}
	}
}
