package aggregator_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// TestAckDelayHeader checks the Toolbus-Ack-Delay every call carries: the
// delay asked for, at most half the ack timeout and half the heartbeat
// interval, in whole milliseconds, and none when it would be below one
// millisecond or liveness is off.
func TestAckDelayHeader(t *testing.T) {
	tests := []struct {
		name string
		opts []aggregator.Option
		want string // "" for no header
	}{
		{name: "none by default", want: ""},
		{name: "zero asks for the ack at once", opts: []aggregator.Option{aggregator.WithAckDelay(0)}, want: ""},
		{name: "set", opts: []aggregator.Option{aggregator.WithAckDelay(100 * time.Millisecond)}, want: "100"},
		{name: "half the ack timeout at most",
			opts: []aggregator.Option{aggregator.WithAckDelay(time.Second), aggregator.WithAckTimeout(300 * time.Millisecond)}, want: "150"},
		{name: "half the heartbeat at most",
			opts: []aggregator.Option{aggregator.WithAckDelay(time.Second), aggregator.WithHeartbeat(100*time.Millisecond, 3)}, want: "50"},
		{name: "cut by a short ack timeout",
			opts: []aggregator.Option{aggregator.WithAckDelay(20 * time.Millisecond), aggregator.WithAckTimeout(30 * time.Millisecond)}, want: "15"},
		{name: "whole milliseconds", opts: []aggregator.Option{aggregator.WithAckDelay(1999 * time.Microsecond)}, want: "1"},
		{name: "below a millisecond none", opts: []aggregator.Option{aggregator.WithAckDelay(999 * time.Microsecond)}, want: ""},
		{name: "a millisecond ack timeout leaves none",
			opts: []aggregator.Option{aggregator.WithAckDelay(20 * time.Millisecond), aggregator.WithAckTimeout(time.Millisecond)}, want: ""},
		{name: "none without liveness", opts: []aggregator.Option{aggregator.WithAckDelay(20 * time.Millisecond), aggregator.WithHeartbeat(0, 1)}, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			got := make(chan nats.Header, 1)
			rawServe(t, wc, "hb", func(m *nats.Msg, _ int) {
				got <- m.Header
				bus.Reply(m, schema.ReplyResult([]byte(`1`)))
			})
			a := newAgg(t, ac, tc.opts...)
			if r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "hb", "")})[0]; r.Error != nil {
				t.Fatalf("Dispatch = %v, want a result", r.Error)
			}
			h := <-got
			v, sent := h[schema.HeaderAckDelay]
			if tc.want == "" {
				if sent {
					t.Errorf("%s header = %q, want none", schema.HeaderAckDelay, v)
				}
				return
			}
			if got := h.Get(schema.HeaderAckDelay); got != tc.want {
				t.Errorf("%s header = %q, want %q", schema.HeaderAckDelay, got, tc.want)
			}
		})
	}
}

func TestAckDelayMustNotBeNegative(t *testing.T) {
	ac, _ := setup(t)
	if _, err := aggregator.New(ac, aggregator.WithAckDelay(-time.Millisecond)); err == nil {
		t.Error("New(WithAckDelay(-1ms)) error = nil, want an error")
	}
}

// TestAckDelayLiveness checks that the aggregator takes what a worker may
// do with Toolbus-Ack-Delay for a call alive: no ack at all for a call it
// answers at once, or an ack once the delay has passed. Both calls are
// retry-safe, so that a call the aggregator took for unacknowledged or
// lost would reach the worker twice.
func TestAckDelayLiveness(t *testing.T) {
	tests := []struct {
		name   string
		opts   []aggregator.Option
		worker func(m *nats.Msg, delay time.Duration)
	}{
		{
			name: "a reply within the delay needs no ack",
			// The ack timeout is far beyond the reply; the delay is half
			// the heartbeat.
			opts: []aggregator.Option{aggregator.WithHeartbeat(20*time.Millisecond, 3), aggregator.WithAckTimeout(time.Minute)},
			worker: func(m *nats.Msg, _ time.Duration) {
				bus.Reply(m, schema.ReplyResult([]byte(`"done"`)))
			},
		},
		{
			// The ack comes when the delay has passed, then beats ten
			// times an interval, for twice the silence that marks a
			// worker lost: only a pause of the whole 300ms of silence
			// between two of them, or of the whole ack timeout (1s)
			// before the ack, could lose the call.
			name: "an ack after the delay, then beats, keep a call alive",
			opts: []aggregator.Option{aggregator.WithHeartbeat(100*time.Millisecond, 3)},
			worker: func(m *nats.Msg, delay time.Duration) {
				time.AfterFunc(delay, func() {
					progress(m, schema.ProgressAck)
					for start := time.Now(); time.Since(start) < 600*time.Millisecond; {
						time.Sleep(10 * time.Millisecond)
						progress(m, schema.ProgressBeat)
					}
					bus.Reply(m, schema.ReplyResult([]byte(`"done"`)))
				})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			var tries atomic.Int64
			rawServe(t, wc, "idem.m", func(m *nats.Msg, _ int) {
				tries.Add(1)
				ms, err := strconv.Atoi(m.Header.Get(schema.HeaderAckDelay))
				if err != nil || ms <= 0 {
					t.Errorf("%s header = %q, want a positive number of milliseconds", schema.HeaderAckDelay, m.Header.Get(schema.HeaderAckDelay))
				}
				tc.worker(m, time.Duration(ms)*time.Millisecond)
			})
			a := newAgg(t, ac, append([]aggregator.Option{aggregator.WithRetrySafe("idem.*"), aggregator.WithAckDelay(20 * time.Millisecond)}, tc.opts...)...)
			c := call(`1`, "idem.m", "")
			c.Timeout = time.Minute
			r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
			if r.Error != nil || string(r.Result) != `"done"` {
				t.Fatalf("Dispatch(idem.m) = %s, %v, want \"done\"", r.Result, r.Error)
			}
			if got := tries.Load(); got != 1 {
				t.Errorf("worker received %d attempts, want 1", got)
			}
		})
	}
}

// TestAckDelayWithTheGoWorker runs toolbus's aggregator and worker runtime
// together and watches their reply subjects: a call answered within the
// delay is answered with its reply alone, and a longer one is acknowledged
// once and kept alive by beats.
func TestAckDelayWithTheGoWorker(t *testing.T) {
	ac, wc := setup(t)
	rt, err := worker.New(wc, worker.WithLogger(quiet), worker.WithoutStatus())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	// slow answers once the test has seen its ack and a beat.
	seen := make(chan struct{})
	free := sync.OnceFunc(func() { close(seen) })
	t.Cleanup(free) // before the shutdown, should the test fail early
	if err := rt.HandleFunc("quick", func(context.Context, *worker.Request) (any, error) { return "done", nil }); err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("slow", func(context.Context, *worker.Request) (any, error) {
		<-seen
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	// The worker publishes everything of a call on one connection, so the
	// watcher gets it in the order the aggregator does.
	watch := func(t *testing.T, prefix string) *nats.Subscription {
		t.Helper()
		sub, err := wc.SubscribeSync(prefix + ".>")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		if err := wc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	kinds := func(t *testing.T, sub *nats.Subscription, until func(kind string) bool) []string {
		t.Helper()
		var got []string
		for {
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			kind := m.Header.Get(schema.HeaderProgress)
			if kind == "" {
				kind = "reply"
			}
			got = append(got, kind)
			if until(kind) {
				return got
			}
		}
	}

	t.Run("quick", func(t *testing.T) {
		sub := watch(t, "quick")
		// A delay of half a minute: the call is answered long before.
		a := newAgg(t, ac, aggregator.WithReplyPrefix("quick"), aggregator.WithHeartbeat(time.Minute, 3),
			aggregator.WithAckTimeout(time.Minute), aggregator.WithAckDelay(time.Minute))
		r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "quick", "")})[0]
		if r.Error != nil || string(r.Result) != `"done"` {
			t.Fatalf("Dispatch(quick) = %s, %v, want \"done\"", r.Result, r.Error)
		}
		if got := kinds(t, sub, func(string) bool { return true }); got[0] != "reply" {
			t.Errorf("messages on the reply subject %q, want the reply alone", got)
		}
	})
	t.Run("slow", func(t *testing.T) {
		sub := watch(t, "slow")
		// A delay of 20ms; a silence of 20 beats of 250ms before the
		// worker is taken for lost, which no busy machine reaches.
		a := newAgg(t, ac, aggregator.WithReplyPrefix("slow"), aggregator.WithHeartbeat(250*time.Millisecond, 20),
			aggregator.WithAckDelay(20*time.Millisecond))
		done := make(chan schema.Response, 1)
		go func() { done <- schema.Collect(context.Background(), a, []schema.Call{call(`1`, "slow", "")})[0] }()
		got := kinds(t, sub, func(kind string) bool { return kind == schema.ProgressBeat })
		if len(got) != 2 || got[0] != schema.ProgressAck {
			t.Errorf("messages on the reply subject %q, want an ack, then a beat", got)
		}
		free()
		if r := <-done; r.Error != nil || string(r.Result) != `"done"` {
			t.Fatalf("Dispatch(slow) = %s, %v, want \"done\"", r.Result, r.Error)
		}
		got = append(got, kinds(t, sub, func(kind string) bool { return kind == "reply" })...)
		for _, k := range got[2:] {
			if k != schema.ProgressBeat && k != "reply" {
				t.Errorf("messages on the reply subject %q, want one ack, then beats and the reply", got)
				break
			}
		}
	})
}
