package aggregator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestIdempotency(t *testing.T) {
	ac, wc := setup(t)
	js, err := jetstream.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := aggregator.IdempotencyBucket(context.Background(), js, bus.DefaultSubjects(), time.Minute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	serve(t, wc, "count", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		n := runs.Add(1)
		entered <- struct{}{}
		<-release
		return schema.ReplyResult([]byte{'0' + byte(n)})
	})
	var flaky atomic.Int64
	serve(t, wc, "flaky", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		if flaky.Add(1) == 1 {
			return schema.ReplyError(schema.NewError(schema.CodeUnavailable, "unavailable", nil))
		}
		return schema.ReplyResult([]byte(`"ok"`))
	})
	// Two aggregators share the bucket, as two ingress replicas would.
	a1 := newAgg(t, ac, idemStore(t, kv))
	a2 := newAgg(t, wc, idemStore(t, kv))

	first := make(chan schema.Response, 1)
	go func() { first <- collectKeyed(a1, "k1", []schema.Call{call(`1`, "count", `[1]`)})[0] }()
	<-entered
	second := make(chan schema.Response, 1)
	go func() { second <- collectKeyed(a2, "k1", []schema.Call{call(`2`, "count", `[1]`)})[0] }()
	close(release)
	r1, r2 := <-first, <-second
	if r1.Error != nil || string(r1.Result) != "1" || r2.Error != nil || string(r2.Result) != "1" {
		t.Fatalf("duplicates = (%s %v) and (%s %v), want 1 twice", r1.Result, r1.Error, r2.Result, r2.Error)
	}
	if string(r2.ID) != "2" {
		t.Errorf("duplicate's id = %s, want its own, 2", r2.ID)
	}

	tests := []struct {
		name     string
		key      string
		calls    []schema.Call
		want     []string
		wantCode int
		wantRuns int64
	}{
		{name: "replayed after it finished", key: "k1", calls: []schema.Call{call(`3`, "count", `[1]`)}, want: []string{"1"}, wantRuns: 1},
		{name: "other params", key: "k1", calls: []schema.Call{call(`4`, "count", `[2]`)}, wantCode: schema.CodeInvalidRequest, wantRuns: 1},
		{name: "no key runs again", calls: []schema.Call{call(`5`, "count", `[1]`)}, want: []string{"2"}, wantRuns: 2},
		{name: "batch runs each id", key: "b", calls: []schema.Call{call(`1`, "count", ``), call(`2`, "count", ``)}, want: []string{"", ""}, wantRuns: 4},
		{name: "batch replayed by id", key: "b", calls: []schema.Call{call(`2`, "count", ``), call(`1`, "count", ``)}, want: []string{"", ""}, wantRuns: 4},
		{name: "retryable failure is not kept", key: "f", calls: []schema.Call{call(`1`, "flaky", ``)}, wantCode: schema.CodeUnavailable, wantRuns: 4},
		{name: "so the retry runs", key: "f", calls: []schema.Call{call(`1`, "flaky", ``)}, want: []string{`"ok"`}, wantRuns: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := collectKeyed(a2, tc.key, tc.calls)
			for i, r := range rs {
				if tc.wantCode != 0 {
					var e *schema.Error
					if !errors.As(r.Error, &e) || e.Code != tc.wantCode {
						t.Errorf("call %d = %s %v, want code %d", i, r.Result, r.Error, tc.wantCode)
					}
					continue
				}
				if r.Error != nil || (tc.want[i] != "" && string(r.Result) != tc.want[i]) {
					t.Errorf("call %d = %s %v, want %s", i, r.Result, r.Error, tc.want[i])
				}
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("count ran %d times, want %d", got, tc.wantRuns)
			}
		})
	}
}
