package aggregator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// TestCallWhileNATSIsAwayIsRefusedAtOnce checks that a call made while the
// aggregator's connection is reconnecting is answered -32003
// bus_disconnected at once, rather than waiting in the reconnect buffer
// until its deadline, in a batch and alone.
func TestCallWhileNATSIsAwayIsRefusedAtOnce(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	down := make(chan struct{}, 1)
	ac, err := e.Connect(bus.WithLogger(quiet), bus.WithStatusFunc(func(_ *nats.Conn, err error) {
		if err != nil {
			select {
			case down <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	wc, err := e.Connect(bus.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	serve(t, wc, "echo", echo)
	a := newAgg(t, ac)
	if r := dispatch(a, call("0", "echo", `{}`)); r.Error != nil {
		t.Fatalf("echo while connected = %v, want a result", r.Error)
	}
	// With a handler in the process, what it takes needs no NATS.
	withLocal := newAgg(t, ac, aggregator.WithLocal(&fakeLocal{try: func(_ context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
		if c.Method != "here" {
			return nil, nil, false
		}
		return json.RawMessage(`"local"`), nil, true
	}}))

	e.Shutdown()
	select {
	case <-down:
	case <-time.After(testwait.Limit):
		t.Fatalf("the aggregator's connection was not told it dropped within %v", testwait.Limit)
	}
	if r := dispatch(withLocal, call("9", "here", `{}`)); r.Error != nil || string(r.Result) != `"local"` {
		t.Errorf("a local call while NATS is away = %s %v, want the local result", r.Result, r.Error)
	}
	if r := dispatch(withLocal, call("9", "echo", `{}`)); r.Error == nil || r.Error.Reason() != schema.ReasonBusDisconnected {
		t.Errorf("a call no local handler takes while NATS is away = %s %v, want %q", r.Result, r.Error, schema.ReasonBusDisconnected)
	}
	for _, n := range []int{1, 3} {
		calls := make([]schema.Call, n)
		for i := range calls {
			calls[i] = call(string(rune('1'+i)), "echo", `{}`)
			calls[i].Timeout = 30 * time.Second
		}
		for i, r := range dispatchAll(a, calls) {
			if r.Error == nil {
				t.Fatalf("call %d of %d while NATS is away = %s, want an error", i, n, r.Result)
			}
			if r.Error.Code == schema.CodeTimeout {
				t.Fatalf("call %d of %d while NATS is away waited out its deadline: %v", i, n, r.Error)
			}
			if r.Error.Code != schema.CodeUnavailable || r.Error.Reason() != schema.ReasonBusDisconnected {
				t.Errorf("call %d of %d while NATS is away = %d %q, want %d %q",
					i, n, r.Error.Code, r.Error.Reason(), schema.CodeUnavailable, schema.ReasonBusDisconnected)
			}
			var data struct {
				Retryable    bool  `json:"retryable"`
				RetryAfterMs int64 `json:"retry_after_ms"`
			}
			if b, err := json.Marshal(r.Error.Data); err != nil || json.Unmarshal(b, &data) != nil || !data.Retryable || data.RetryAfterMs <= 0 {
				t.Errorf("data of the refusal = %s, want retryable with retry_after_ms", b)
			}
		}
	}
}

// dispatch runs one call and returns its answer.
func dispatch(a *aggregator.Aggregator, c schema.Call) schema.Response {
	return dispatchAll(a, []schema.Call{c})[0]
}

// dispatchAll runs calls as one batch and returns their answers in order.
func dispatchAll(a *aggregator.Aggregator, calls []schema.Call) []schema.Response {
	out := make([]schema.Response, len(calls))
	a.Dispatch(context.Background(), calls, func(i int, r schema.Response) { out[i] = r })
	return out
}
