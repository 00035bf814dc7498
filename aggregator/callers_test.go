package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/schema"
)

// callerCall is a call of method from caller.
func callerCall(id, method, caller string) schema.Call {
	c := call(id, method, "1")
	c.Caller = caller
	return c
}

// TestCallerMaxInFlight: a caller holding its share of the in-flight cap
// is refused naming caller_max_in_flight, while another caller's call and
// the anonymous caller's still run.
func TestCallerMaxInFlight(t *testing.T) {
	tests := []struct {
		name  string
		opts  []aggregator.Option
		share int
	}{
		{name: "half of max in flight by default", opts: []aggregator.Option{aggregator.WithMaxInFlight(4)}, share: 2},
		{name: "configured", opts: []aggregator.Option{aggregator.WithMaxInFlight(8), aggregator.WithCallerMaxInFlight(1)}, share: 1},
		{name: "never above max in flight", opts: []aggregator.Option{aggregator.WithMaxInFlight(3), aggregator.WithCallerMaxInFlight(9)}, share: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac, wc := setup(t)
			release := make(chan struct{})
			started := make(chan struct{}, 16)
			serve(t, wc, "hold", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
				started <- struct{}{}
				<-release
				return schema.ReplyResult([]byte(`1`))
			})
			serve(t, wc, "echo", echo)
			a := newAgg(t, ac, tt.opts...)
			if got := a.CallerMaxInFlight(); got != tt.share {
				t.Fatalf("CallerMaxInFlight() = %d, want %d", got, tt.share)
			}
			var wg sync.WaitGroup
			for i := range tt.share {
				wg.Add(1)
				go func() {
					defer wg.Done()
					schema.Collect(context.Background(), a, []schema.Call{callerCall(string(rune('1'+i)), "hold", "flood")})
				}()
				<-started
			}
			defer wg.Wait()
			defer close(release)

			over := schema.Collect(context.Background(), a, []schema.Call{callerCall(`"over"`, "echo", "flood")})[0]
			if !errors.Is(over.Error, schema.ErrOverloaded) {
				t.Fatalf("the flooding caller's next call = %+v, want -32002", over)
			}
			var data struct {
				Limit      string `json:"limit"`
				Max        int    `json:"max"`
				RetryAfter int64  `json:"retry_after_ms"`
			}
			if err := json.Unmarshal(over.Error.Data, &data); err != nil || data.Limit != "caller_max_in_flight" || data.Max != tt.share || data.RetryAfter <= 0 {
				t.Fatalf("refusal data = %s, want limit caller_max_in_flight, max %d and retry_after_ms", over.Error.Data, tt.share)
			}
			if tt.share < 3 {
				other := schema.Collect(context.Background(), a, []schema.Call{callerCall(`"other"`, "echo", "quiet")})[0]
				if other.Error != nil {
					t.Fatalf("another caller's call = %v, want a result", other.Error)
				}
				anon := schema.Collect(context.Background(), a, []schema.Call{callerCall(`"anon"`, "echo", "")})[0]
				if anon.Error != nil {
					t.Fatalf("the anonymous caller's call = %v, want a result (its share is the whole cap)", anon.Error)
				}
			}
		})
	}
}

// TestAnonymousCallerHasTheWholeCap: without authentication every call is
// the empty caller's, which only the global cap bounds.
func TestAnonymousCallerHasTheWholeCap(t *testing.T) {
	ac, wc := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	serve(t, wc, "hold", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		started <- struct{}{}
		<-release
		return schema.ReplyResult([]byte(`1`))
	})
	a := newAgg(t, ac, aggregator.WithMaxInFlight(4))
	calls := []schema.Call{call(`1`, "hold", ""), call(`2`, "hold", ""), call(`3`, "hold", ""), call(`4`, "hold", "")}
	done := make(chan []schema.Response)
	go func() { done <- schema.Collect(context.Background(), a, calls) }()
	for range calls {
		<-started
	}
	close(release)
	for _, r := range <-done {
		if r.Error != nil {
			t.Fatalf("anonymous call %s = %v, want a result", r.ID, r.Error)
		}
	}
}
