package aggregator_test

import (
	"context"
	"encoding/json"
	"slices"
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

// TestAckDelayHeader checks the Toolbus-Ack-Delay of the calls of a
// method: none on the first, which asks for the ack at once since the
// aggregator does not know yet whether the method's workers acknowledge;
// then, once one has, the delay asked for, at most half the ack timeout
// and half the heartbeat interval, in whole milliseconds, and none when
// it would be below one millisecond or liveness is off.
func TestAckDelayHeader(t *testing.T) {
	byDefault := ""
	if aggregator.DefaultAckDelay > 0 {
		byDefault = strconv.FormatInt(aggregator.DefaultAckDelay.Milliseconds(), 10)
	}
	tests := []struct {
		name string
		opts []aggregator.Option
		want string // "" for no header
	}{
		{name: "by default", want: byDefault},
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
			got := make(chan nats.Header, 2)
			// A worker that speaks rule 8 and answers at once: an ack
			// first unless the call lets it hold the ack back.
			rawServe(t, wc, "hb", func(m *nats.Msg, _ int) {
				got <- m.Header
				if m.Header.Get(schema.HeaderHeartbeat) != "" && m.Header.Get(schema.HeaderAckDelay) == "" {
					progress(m, schema.ProgressAck)
				}
				bus.Reply(m, schema.ReplyResult([]byte(`1`)))
			})
			a := newAgg(t, ac, tc.opts...)
			for i, want := range []string{"", tc.want} {
				if r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "hb", "")})[0]; r.Error != nil {
					t.Fatalf("Dispatch = %v, want a result", r.Error)
				}
				h := <-got
				if v, sent := h[schema.HeaderAckDelay]; want == "" && sent {
					t.Errorf("call %d: %s header = %q, want none", i+1, schema.HeaderAckDelay, v)
				} else if want != "" && h.Get(schema.HeaderAckDelay) != want {
					t.Errorf("call %d: %s header = %q, want %q", i+1, schema.HeaderAckDelay, h.Get(schema.HeaderAckDelay), want)
				}
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
			rawServe(t, wc, "idem.m", func(m *nats.Msg, attempt int) {
				if attempt == 1 {
					// The method's first call asks for the ack at once.
					progress(m, schema.ProgressAck)
					bus.Reply(m, schema.ReplyResult([]byte(`"warm"`)))
					return
				}
				tries.Add(1)
				ms, err := strconv.Atoi(m.Header.Get(schema.HeaderAckDelay))
				if err != nil || ms <= 0 {
					t.Errorf("%s header = %q, want a positive number of milliseconds", schema.HeaderAckDelay, m.Header.Get(schema.HeaderAckDelay))
				}
				tc.worker(m, time.Duration(ms)*time.Millisecond)
			})
			a := newAgg(t, ac, append([]aggregator.Option{aggregator.WithRetrySafe("idem.*"), aggregator.WithAckDelay(20 * time.Millisecond)}, tc.opts...)...)
			if r := schema.Collect(context.Background(), a, []schema.Call{call(`0`, "idem.m", "")})[0]; r.Error != nil {
				t.Fatalf("Dispatch(first idem.m) = %v, want a result", r.Error)
			}
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
// together and watches their reply subjects: once a method's first call
// was acknowledged, a call answered within the delay is answered with its
// reply alone, and a longer one is acknowledged once and kept alive by
// beats.
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
	// slow answers once the test has seen its ack and a beat, or at once
	// when its params say "now".
	seen := make(chan struct{})
	free := sync.OnceFunc(func() { close(seen) })
	t.Cleanup(free) // before the shutdown, should the test fail early
	if err := rt.HandleFunc("quick", func(context.Context, *worker.Request) (any, error) { return "done", nil }); err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("slow", func(_ context.Context, req *worker.Request) (any, error) {
		if string(req.Params) != `"now"` {
			<-seen
		}
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
		// The first call asks for the ack at once; the next lets the
		// worker hold it back.
		for i, want := range [][]string{{schema.ProgressAck, "reply"}, {"reply"}} {
			r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "quick", "")})[0]
			if r.Error != nil || string(r.Result) != `"done"` {
				t.Fatalf("Dispatch(quick) = %s, %v, want \"done\"", r.Result, r.Error)
			}
			if got := kinds(t, sub, func(kind string) bool { return kind == "reply" }); !slices.Equal(got, want) {
				t.Errorf("call %d: messages on the reply subject %q, want %q", i+1, got, want)
			}
		}
	})
	t.Run("slow", func(t *testing.T) {
		sub := watch(t, "slow")
		// A delay of 20ms; a silence of 20 beats of 250ms before the
		// worker is taken for lost, which no busy machine reaches.
		a := newAgg(t, ac, aggregator.WithReplyPrefix("slow"), aggregator.WithHeartbeat(250*time.Millisecond, 20),
			aggregator.WithAckDelay(20*time.Millisecond))
		// A first call, acknowledged at once, lets the next hold its ack
		// back.
		if r := schema.Collect(context.Background(), a, []schema.Call{call(`0`, "slow", `"now"`)})[0]; r.Error != nil {
			t.Fatalf("Dispatch(first slow) = %v, want a result", r.Error)
		}
		if got := kinds(t, sub, func(kind string) bool { return kind == "reply" }); got[0] != schema.ProgressAck {
			t.Errorf("messages of the first call on the reply subject %q, want an ack first", got)
		}
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

// TestWorkerLostWithinTheAckDelay kills a Go worker while it holds a call
// whose ack it may hold back, before the ack is due: a worker that
// acknowledges would have spoken by the end of the delay, so the
// aggregator takes the silence for a lost worker, as it does a worker
// silent after its ack, and answers worker_lost long before the
// deadline.
func TestWorkerLostWithinTheAckDelay(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	conn := func() *nats.Conn {
		nc, err := e.Connect(bus.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ac, wc, watcher := conn(), conn(), conn()

	// Each call of hold says it started, then waits for the test.
	type held struct{ release chan struct{} }
	entered := make(chan held, 1)
	rt, err := worker.New(wc, worker.WithLogger(quiet), worker.WithoutStatus())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The runtime stops its own goroutines; its connection, closed
		// by the test, has nothing left to drain.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	// Run before the shutdown: a handler still held returns.
	var releases []chan struct{}
	t.Cleanup(func() {
		for _, r := range releases {
			close(r)
		}
	})
	if err := rt.HandleFunc("hold", func(ctx context.Context, _ *worker.Request) (any, error) {
		h := held{release: make(chan struct{})}
		entered <- h
		select {
		case <-h.release:
			return "done", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	sub, err := watcher.SubscribeSync("lost.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	// A delay of 200ms, half the heartbeat interval: far more than the
	// test needs to kill the worker once the handler has started. A
	// deadline of 20s, far beyond the delay and two silent intervals.
	a := newAgg(t, ac, aggregator.WithReplyPrefix("lost"), aggregator.WithHeartbeat(400*time.Millisecond, 2),
		aggregator.WithAckDelay(200*time.Millisecond))
	hold := func(id string) schema.Call {
		c := call(id, "hold", "")
		c.Timeout = 20 * time.Second
		return c
	}

	// The method's first call asks for the ack at once: its worker
	// acknowledges it, and the next call may have its ack held back.
	done := make(chan schema.Response, 1)
	go func() { done <- schema.Collect(context.Background(), a, []schema.Call{hold(`1`)})[0] }()
	first := <-entered
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no ack of the first call: %v", err)
		}
		if m.Header.Get(schema.HeaderProgress) == schema.ProgressAck {
			break
		}
	}
	close(first.release)
	if r := <-done; r.Error != nil {
		t.Fatalf("Dispatch(first hold) = %v, want a result", r.Error)
	}

	// The second one's worker dies before its ack is due.
	go func() { done <- schema.Collect(context.Background(), a, []schema.Call{hold(`2`)})[0] }()
	second := <-entered
	releases = append(releases, second.release)
	wc.Close()
	r := <-done
	if r.Error == nil || r.Error.Code != schema.CodeUnavailable || reason(t, r.Error) != schema.ReasonWorkerLost {
		t.Fatalf("Dispatch(hold) on a worker killed within the ack delay = %s, %v, want -32003 %s", r.Result, r.Error, schema.ReasonWorkerLost)
	}
	var data struct {
		MayHaveRun bool `json:"may_have_run"`
	}
	if err := json.Unmarshal(r.Error.Data, &data); err != nil || !data.MayHaveRun {
		t.Errorf("data = %s, want may_have_run true", r.Error.Data)
	}
}
