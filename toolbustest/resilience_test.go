package toolbustest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// hanging registers method with a handler that signals entered and then
// holds the call until release is closed or its context ends.
func hanging(method string, entered chan<- struct{}, release <-chan struct{}) func(*worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		return rt.HandleFunc(method, func(ctx context.Context, _ *worker.Request) (any, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		})
	}
}

func TestDeadWorkerIsNoticedLongBeforeTheDeadline(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithoutWorker(),
		toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Heartbeat, c.HeartbeatMisses = 50*time.Millisecond, 3
		}))
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	w := c.AddWorker(t, hanging("work.hang", entered, release))
	// Registered after the worker, so it runs before the worker's drain.
	t.Cleanup(func() { close(release) })
	done := make(chan schema.Response, 1)
	start := time.Now()
	go func() { done <- c.Call(t, "work.hang", "", "Toolbus-Timeout", "2m") }()
	<-entered
	w.Kill()
	r := <-done
	if r.Error == nil || r.Error.Code != schema.CodeUnavailable {
		t.Fatalf("call on a dead worker = %s %v, want -32003", r.Result, r.Error)
	}
	var data struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.Reason != "worker_lost" {
		t.Errorf("data = %s, want reason worker_lost", r.Error.Data)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the loss took %v to notice, want well under the 2m deadline", d)
	}
}

func TestRetrySafeCallMovesToAnotherWorker(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithoutWorker(),
		toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Heartbeat, c.HeartbeatMisses = 50*time.Millisecond, 3
			c.RetrySafe = []string{"work.*"}
		}))
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	w := c.AddWorker(t, hanging("work.idem", entered, release))
	// Registered after the worker, so it runs before the worker's drain.
	t.Cleanup(func() { close(release) })
	done := make(chan schema.Response, 1)
	go func() { done <- c.Call(t, "work.idem", "", "Toolbus-Timeout", "2m") }()
	<-entered
	c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("work.idem", func(context.Context, *worker.Request) (any, error) { return "second", nil })
	})
	w.Kill()
	if r := <-done; r.Error != nil || string(r.Result) != `"second"` {
		t.Fatalf("retry-safe call after its worker died = %s %v, want \"second\"", r.Result, r.Error)
	}
}

// TestBusyWorkerLeavesCallsToIdleOnes: a slow and a fast worker, one call
// at a time each, and four clients calling one call after another. The
// slow worker holds its first call (and so its client) until the fast one
// has served all the calls of the three other clients: it refuses what it
// has no room for, so nothing queues behind it. Were calls queued at the
// worker they reach, about half would wait behind the slow one and the
// fast one would never get there.
func TestBusyWorkerLeavesCallsToIdleOnes(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithoutWorker())
	var slow, fast atomic.Int64
	release := make(chan struct{})
	c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("work.do", func(context.Context, *worker.Request) (any, error) {
			slow.Add(1)
			<-release
			return "slow", nil
		}, worker.Concurrency(1))
	})
	c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("work.do", func(context.Context, *worker.Request) (any, error) {
			fast.Add(1)
			return "fast", nil
		}, worker.Concurrency(1))
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	const clients, each = 4, 10
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if r := c.Call(t, "work.do", "", "Toolbus-Timeout", "30s"); r.Error != nil {
					failed.Add(1)
				}
			}
		}()
	}
	toolbustest.Eventually(t, func() bool { return fast.Load() >= (clients-1)*each },
		"the idle worker serves every call but the held one's client's")
	held := slow.Load()
	once.Do(func() { close(release) })
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Errorf("%d calls failed, want none", f)
	}
	if f := fast.Load(); held != 1 || f < (clients-1)*each {
		t.Errorf("slow worker took %d calls while the fast one served %d, want 1 and at least %d", held, f, (clients-1)*each)
	}
	if got := slow.Load() + fast.Load(); got != clients*each {
		t.Errorf("calls run = %d, want %d", got, clients*each)
	}
}

func TestIdempotencyKeyAcrossIngresses(t *testing.T) {
	var runs atomic.Int64
	c := toolbustest.Start(t, toolbustest.WithIdempotency(time.Minute), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("pay", func(context.Context, *worker.Request) (any, error) {
			return runs.Add(1), nil
		})
	}))
	other := c.AddIngress(t)
	tests := []struct {
		name     string
		url      string
		key      string
		params   string
		want     string
		wantCode int
		wantRuns int64
	}{
		{name: "first", url: c.URL, key: "order-1", params: `{"amount":5}`, want: "1", wantRuns: 1},
		{name: "replayed on another ingress", url: other.URL, key: "order-1", params: `{"amount":5}`, want: "1", wantRuns: 1},
		{name: "reused for another call", url: other.URL, key: "order-1", params: `{"amount":6}`, wantCode: schema.CodeInvalidRequest, wantRuns: 1},
		{name: "another key", url: c.URL, key: "order-2", params: `{"amount":5}`, want: "2", wantRuns: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, body := c.PostURL(t, tc.url, `{"jsonrpc":"2.0","id":7,"method":"pay","params":`+tc.params+`}`, "Idempotency-Key", tc.key)
			var r schema.Response
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
			if tc.wantCode != 0 {
				if r.Error == nil || r.Error.Code != tc.wantCode {
					t.Errorf("pay = %s %v, want code %d", r.Result, r.Error, tc.wantCode)
				}
			} else if r.Error != nil || string(r.Result) != tc.want {
				t.Errorf("pay = %s %v, want %s", r.Result, r.Error, tc.want)
			}
			if got := runs.Load(); got != tc.wantRuns {
				t.Errorf("pay ran %d times, want %d", got, tc.wantRuns)
			}
		})
	}
	status, _ := c.Post(t, `{"jsonrpc":"2.0","id":1,"method":"pay"}`, "Idempotency-Key", "bad key with spaces")
	if status != http.StatusBadRequest {
		t.Errorf("a malformed Idempotency-Key = HTTP %d, want 400", status)
	}
}

// TestOverloadIsRefusedQuickly sends ten times the calls the workers can
// hold at once: those the workers cannot take are answered -32002 with a
// retry hint soon after the busy wait, never left to run into their long
// deadline, and every other call succeeds.
func TestOverloadIsRefusedQuickly(t *testing.T) {
	const slots = 4
	c := toolbustest.Start(t,
		toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.BusyWait = 100 * time.Millisecond
		}),
		toolbustest.WithTools(func(rt *worker.Runtime) error {
			return rt.HandleFunc("work.slow", func(ctx context.Context, _ *worker.Request) (any, error) {
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				return "ok", nil
			}, worker.Concurrency(slots))
		}))
	const calls = 10 * slots
	var wg sync.WaitGroup
	var ok, refused, other atomic.Int64
	start := time.Now()
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Call(t, "work.slow", "", "Toolbus-Timeout", "1m")
			switch {
			case r.Error == nil:
				ok.Add(1)
			case r.Error.Code == schema.CodeOverloaded:
				var d struct {
					RetryAfter int64  `json:"retry_after_ms"`
					Reason     string `json:"reason"`
				}
				if json.Unmarshal(r.Error.Data, &d) == nil && d.RetryAfter > 0 && d.Reason == "workers_busy" {
					refused.Add(1)
					return
				}
				other.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	wg.Wait()
	if o, r, x := ok.Load(), refused.Load(), other.Load(); o < slots || r == 0 || x != 0 || o+r != calls {
		t.Errorf("answers: %d ok, %d refused with a hint, %d other; want at least %d ok, some refused, none other", o, r, x, slots)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("overload took %v to answer, want far less than the 1m deadline", d)
	}
}
