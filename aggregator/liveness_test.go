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

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// rawServe answers calls of method with fn, which gets the message and the
// number of the attempt (1 for the first message received).
func rawServe(t *testing.T, nc *nats.Conn, method string, fn func(m *nats.Msg, attempt int)) {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.QueueSubscribe("toolbus.call."+method, "toolbus-workers", func(m *nats.Msg) {
		fn(m, int(n.Add(1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func progress(m *nats.Msg, v string) {
	m.RespondMsg(&nats.Msg{Header: nats.Header{schema.HeaderProgress: []string{v}}})
}

func reason(t *testing.T, e *schema.Error) string {
	t.Helper()
	var d struct {
		Reason string `json:"reason"`
	}
	if e == nil || json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Reason
}

func TestLiveness(t *testing.T) {
	// Every case runs under a deadline far beyond the time it takes to
	// notice a lost worker (three beats of 20ms).
	const long = time.Minute
	tests := []struct {
		name      string
		opts      []aggregator.Option
		worker    func(m *nats.Msg, attempt int)
		timeout   time.Duration
		wantCode  int
		wantRes   string
		wantWhy   string
		wantTries int64
	}{
		{
			name: "silent after ack is lost",
			worker: func(m *nats.Msg, _ int) {
				progress(m, schema.ProgressAck)
			},
			timeout: long, wantCode: schema.CodeUnavailable, wantWhy: "worker_lost", wantTries: 1,
		},
		{
			// The call outlives the silence that marks a worker lost
			// twice over. Its beats come ten times an interval, so that
			// only a pause of the whole 300ms of silence between two of
			// them, not a busy machine's delay of a few, could lose it.
			name: "beats keep a slow call alive",
			opts: []aggregator.Option{aggregator.WithHeartbeat(100*time.Millisecond, 3)},
			worker: func(m *nats.Msg, _ int) {
				go func() {
					progress(m, schema.ProgressAck)
					for start := time.Now(); time.Since(start) < 600*time.Millisecond; {
						time.Sleep(10 * time.Millisecond)
						progress(m, schema.ProgressBeat)
					}
					bus.Reply(m, schema.ReplyResult([]byte(`"done"`)))
				}()
			},
			timeout: long, wantRes: `"done"`, wantTries: 1,
		},
		{
			name: "lost retry-safe call runs again",
			opts: []aggregator.Option{aggregator.WithRetrySafe("idem.*")},
			worker: func(m *nats.Msg, attempt int) {
				progress(m, schema.ProgressAck)
				if attempt > 1 {
					bus.Reply(m, schema.ReplyResult([]byte(`2`)))
				}
			},
			timeout: long, wantRes: `2`, wantTries: 2,
		},
		{
			name: "lost call of a tool advertised idempotent runs again",
			opts: []aggregator.Option{aggregator.WithRetrySafeFunc(func(m string) bool { return strings.HasPrefix(m, "idem.") })},
			worker: func(m *nats.Msg, attempt int) {
				progress(m, schema.ProgressAck)
				if attempt > 1 {
					bus.Reply(m, schema.ReplyResult([]byte(`2`)))
				}
			},
			timeout: long, wantRes: `2`, wantTries: 2,
		},
		{
			name: "unacknowledged retry-safe call is published again",
			opts: []aggregator.Option{aggregator.WithRetrySafe("idem.*"), aggregator.WithAckTimeout(30 * time.Millisecond)},
			worker: func(m *nats.Msg, attempt int) {
				if attempt > 1 {
					bus.Reply(m, schema.ReplyResult([]byte(`2`)))
				}
			},
			timeout: long, wantRes: `2`, wantTries: 2,
		},
		{
			name:    "unacknowledged call that is not retry-safe waits for its deadline",
			opts:    []aggregator.Option{aggregator.WithAckTimeout(30 * time.Millisecond)},
			worker:  func(*nats.Msg, int) {},
			timeout: 300 * time.Millisecond, wantCode: schema.CodeTimeout, wantTries: 1,
		},
		{
			name: "a worker that never acks is waited for",
			worker: func(m *nats.Msg, _ int) {
				go func() {
					time.Sleep(200 * time.Millisecond)
					bus.Reply(m, schema.ReplyResult([]byte(`"old"`)))
				}()
			},
			timeout: long, wantRes: `"old"`, wantTries: 1,
		},
		{
			name: "refused for too long is overloaded",
			opts: []aggregator.Option{aggregator.WithBusyWait(50 * time.Millisecond)},
			worker: func(m *nats.Msg, _ int) {
				progress(m, schema.ProgressBusy)
			},
			timeout: long, wantCode: schema.CodeOverloaded, wantWhy: "workers_busy", wantTries: -1,
		},
		{
			name: "busy refusal is published again",
			worker: func(m *nats.Msg, attempt int) {
				if attempt < 3 {
					progress(m, schema.ProgressBusy)
					return
				}
				bus.Reply(m, schema.ReplyResult([]byte(`3`)))
			},
			timeout: long, wantRes: `3`, wantTries: 3,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			method := "idem.m" + string(rune('a'+i))
			var tries atomic.Int64
			rawServe(t, wc, method, func(m *nats.Msg, attempt int) {
				tries.Add(1)
				tc.worker(m, attempt)
			})
			opts := append([]aggregator.Option{aggregator.WithHeartbeat(20*time.Millisecond, 3)}, tc.opts...)
			a := newAgg(t, ac, opts...)
			c := call(`1`, method, "")
			c.Timeout = tc.timeout
			start := time.Now()
			r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
			if got := code(r); got != tc.wantCode {
				t.Fatalf("Dispatch(%s) code = %d (%v), want %d", method, got, r.Error, tc.wantCode)
			}
			if tc.wantRes != "" && string(r.Result) != tc.wantRes {
				t.Errorf("Dispatch(%s) result = %s, want %s", method, r.Result, tc.wantRes)
			}
			if tc.wantWhy != "" {
				if got := reason(t, r.Error); got != tc.wantWhy {
					t.Errorf("Dispatch(%s) reason = %q, want %q", method, got, tc.wantWhy)
				}
				if d := time.Since(start); d > tc.timeout/4 {
					t.Errorf("Dispatch(%s) took %v, want the loss noticed well before the %v deadline", method, d, tc.timeout)
				}
			}
			if got := tries.Load(); tc.wantTries >= 0 && got != tc.wantTries {
				t.Errorf("worker received %d attempts, want %d", got, tc.wantTries)
			}
		})
	}
}

func TestHeartbeatHeader(t *testing.T) {
	tests := []struct {
		name             string
		opts             []aggregator.Option
		want, wantMisses string
	}{
		{name: "default", want: "1000", wantMisses: "3"},
		{name: "set", opts: []aggregator.Option{aggregator.WithHeartbeat(250*time.Millisecond, 2)}, want: "250", wantMisses: "2"},
		{name: "off", opts: []aggregator.Option{aggregator.WithHeartbeat(0, 1)}, want: "", wantMisses: ""},
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
			if v := h.Get(schema.HeaderHeartbeat); v != tc.want {
				t.Errorf("%s header = %q, want %q", schema.HeaderHeartbeat, v, tc.want)
			}
			if v := h.Get(schema.HeaderHeartbeatMisses); v != tc.wantMisses {
				t.Errorf("%s header = %q, want %q", schema.HeaderHeartbeatMisses, v, tc.wantMisses)
			}
		})
	}
}

func TestMethodMaxInFlight(t *testing.T) {
	ac, wc := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	serve(t, wc, "hold", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		started <- struct{}{}
		<-release
		return schema.ReplyResult([]byte(`1`))
	})
	serve(t, wc, "other", echo)
	a := newAgg(t, ac, aggregator.WithMethodMaxInFlight("hold", 1))
	done := make(chan schema.Response, 1)
	go func() { done <- schema.Collect(context.Background(), a, []schema.Call{call(`1`, "hold", "")})[0] }()
	<-started
	rs := schema.Collect(context.Background(), a, []schema.Call{call(`2`, "hold", ""), call(`3`, "other", `[1]`)})
	close(release)
	if r := <-done; r.Error != nil {
		t.Fatalf("first hold = %v, want a result", r.Error)
	}
	if !errors.Is(rs[0].Error, schema.ErrOverloaded) {
		t.Fatalf("second hold = %v, want overloaded", rs[0].Error)
	}
	var data struct {
		RetryAfter int64  `json:"retry_after_ms"`
		Limit      string `json:"limit"`
	}
	if err := json.Unmarshal(rs[0].Error.Data, &data); err != nil || data.RetryAfter <= 0 || data.Limit != "method_max_in_flight" {
		t.Errorf("overload data = %s, want retry_after_ms and limit method_max_in_flight", rs[0].Error.Data)
	}
	if rs[1].Error != nil {
		t.Errorf("other = %v, want a result: the cap is per method", rs[1].Error)
	}
}

func report(m *nats.Msg, body string) {
	m.RespondMsg(&nats.Msg{Header: nats.Header{schema.HeaderProgress: []string{schema.ProgressReport}}, Data: []byte(body)})
}

// TestProgressReports checks that the reports a worker sends reach the
// call's Progress in order, that unreadable ones are dropped without
// failing the call, and that reports alone keep a call alive.
func TestProgressReports(t *testing.T) {
	ac, wc := setup(t)
	seen := make(chan schema.JobProgress, 100)
	rawServe(t, wc, "report", func(m *nats.Msg, _ int) {
		go func() {
			progress(m, schema.ProgressAck)
			report(m, `{"percent":"ten"}`)
			report(m, `not json`)
			report(m, `{"percent":10,"message":"started"}`)
			if got := <-seen; got != (schema.JobProgress{Percent: 10, Message: "started"}) {
				t.Errorf("first report = %+v, want {10 started}", got)
			}
			// From here on reports alone, with no beat, keep the call
			// alive, for many times the silence that marks a worker lost
			// (3 x 50ms): a report every 10ms, also while the test
			// waits for the aggregator to hand them on, so that the
			// call's only silences are the reports' own intervals.
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					report(m, fmt.Sprintf(`{"percent":%d}`, 11+i%80))
				}
			}()
			for got := range seen {
				if got.Percent >= 40 {
					break
				}
			}
			close(stop)
			<-stopped
			report(m, `{"percent":99,"message":"almost"}`)
			for got := range seen {
				if got.Percent == 99 {
					break
				}
			}
			bus.Reply(m, schema.ReplyResult([]byte(`"done"`)))
		}()
	})
	a := newAgg(t, ac, aggregator.WithHeartbeat(50*time.Millisecond, 3))
	c := call(`1`, "report", "")
	c.Timeout = time.Minute
	c.Progress = func(percent float64, message string) { seen <- schema.JobProgress{Percent: percent, Message: message} }
	r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
	if r.Error != nil || string(r.Result) != `"done"` {
		t.Fatalf("Dispatch(report) = %s, %v, want \"done\"", r.Result, r.Error)
	}
}

// TestProgressReportsIgnored checks that a call without Progress is
// answered as usual when its worker sends reports.
func TestProgressReportsIgnored(t *testing.T) {
	ac, wc := setup(t)
	rawServe(t, wc, "report", func(m *nats.Msg, _ int) {
		progress(m, schema.ProgressAck)
		report(m, `{"percent":50}`)
		bus.Reply(m, schema.ReplyResult([]byte(`1`)))
	})
	a := newAgg(t, ac, aggregator.WithHeartbeat(20*time.Millisecond, 3))
	if r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "report", "")})[0]; r.Error != nil || string(r.Result) != `1` {
		t.Fatalf("Dispatch(report) = %s, %v, want 1", r.Result, r.Error)
	}
}
