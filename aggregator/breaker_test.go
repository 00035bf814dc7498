package aggregator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestBreaker(t *testing.T) {
	ac, wc := setup(t)
	var healthy atomic.Bool
	var reached atomic.Int64
	serve(t, wc, "down", func(*schema.CallEnvelope, time.Time) *schema.ReplyEnvelope {
		reached.Add(1)
		if healthy.Load() {
			return schema.ReplyResult([]byte(`"up"`))
		}
		return schema.ReplyError(schema.NewError(schema.CodeUnavailable, "unavailable", nil))
	})
	var business atomic.Int64
	serve(t, wc, "refuses", func(*schema.CallEnvelope, time.Time) *schema.ReplyEnvelope {
		business.Add(1)
		return schema.ReplyError(schema.NewError(2001, "insufficient funds", nil))
	})
	// The circuit's open time is TestBreakerOpenTime's, on a fake clock;
	// here it is longer than the test.
	a := newAgg(t, ac, aggregator.WithBreaker(aggregator.Breaker{Failures: 2, OpenFor: time.Hour}))
	one := func(method string) schema.Response {
		return schema.Collect(context.Background(), a, []schema.Call{call(`1`, method, "")})[0]
	}
	steps := []struct {
		name        string
		before      func()
		method      string
		wantCode    int
		wantReason  string
		wantReached int64
	}{
		{name: "first failure reaches the worker", method: "down", wantCode: schema.CodeUnavailable, wantReached: 1},
		{name: "second failure opens", method: "down", wantCode: schema.CodeUnavailable, wantReached: 2},
		{name: "open circuit fails fast", method: "down", wantCode: schema.CodeUnavailable, wantReason: "circuit_open", wantReached: 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != nil {
				st.before()
			}
			r := one(st.method)
			if got := code(r); got != st.wantCode {
				t.Fatalf("%s = %s %v, want code %d", st.method, r.Result, r.Error, st.wantCode)
			}
			if st.wantReason != "" {
				if got := reason(t, r.Error); got != st.wantReason {
					t.Errorf("reason = %q, want %q", got, st.wantReason)
				}
			}
			if got := reached.Load(); got != st.wantReached {
				t.Errorf("worker reached %d times, want %d", got, st.wantReached)
			}
		})
	}
	for range 5 {
		if r := one("refuses"); code(r) != 2001 {
			t.Fatalf("refuses = %v, want the tool's 2001", r.Error)
		}
	}
	if got := business.Load(); got != 5 {
		t.Errorf("a tool's own errors opened the circuit: worker reached %d of 5 times", got)
	}
}

func TestHedge(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		timeout   time.Duration
		wantCode  int
		wantTries int64
	}{
		{name: "retry-safe call is hedged", method: "safe.h", timeout: time.Minute, wantTries: 2},
		{name: "other calls are not", method: "unsafe.h", timeout: 300 * time.Millisecond, wantCode: schema.CodeTimeout, wantTries: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			var tries atomic.Int64
			rawServe(t, wc, tc.method, func(m *nats.Msg, attempt int) {
				tries.Add(1)
				if attempt > 1 {
					bus.Reply(m, schema.ReplyResult([]byte(`"hedge"`)))
				}
			})
			a := newAgg(t, ac, aggregator.WithRetrySafe("safe.*"), aggregator.WithHedge(20*time.Millisecond),
				aggregator.WithAckTimeout(time.Hour))
			c := call(`1`, tc.method, "")
			c.Timeout = tc.timeout
			r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
			if got := code(r); got != tc.wantCode {
				t.Fatalf("%s = %s %v, want code %d", tc.method, r.Result, r.Error, tc.wantCode)
			}
			if got := tries.Load(); got != tc.wantTries {
				t.Errorf("worker received %d attempts, want %d", got, tc.wantTries)
			}
		})
	}
}

func TestNewRejectsBadPolicy(t *testing.T) {
	tests := []struct {
		name string
		opt  aggregator.Option
	}{
		{name: "heartbeat too short", opt: aggregator.WithHeartbeat(time.Millisecond, 3)},
		{name: "no misses", opt: aggregator.WithHeartbeat(time.Second, 0)},
		{name: "retry-safe pattern", opt: aggregator.WithRetrySafe("a..b")},
		{name: "ack timeout", opt: aggregator.WithAckTimeout(0)},
		{name: "attempts", opt: aggregator.WithMaxAttempts(0)},
		{name: "method in-flight", opt: aggregator.WithMethodMaxInFlight("m", 0)},
		{name: "method in-flight name", opt: aggregator.WithMethodMaxInFlight("m.*", 1)},
		{name: "breaker", opt: aggregator.WithBreaker(aggregator.Breaker{Failures: -1})},
		{name: "hedge", opt: aggregator.WithHedge(-time.Second)},
		{name: "busy wait", opt: aggregator.WithBusyWait(0)},
		{name: "idempotency", opt: aggregator.WithIdempotencyStore(nil)},
	}
	ac, _ := setup(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := aggregator.New(ac, tc.opt); err == nil {
				t.Errorf("New(%s) error = nil, want an error", tc.name)
			}
		})
	}
}
