package toolbustest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// TestKilledIngressLeavesNoOrphans: an ingress with 20 slow calls in flight
// dies without draining. The worker running them cancels every one, with
// ErrCallerGone as the cause, a few heartbeats later, rather than running
// them to completion for nobody (and once more for a client that retries
// on another ingress).
func TestKilledIngressLeavesNoOrphans(t *testing.T) {
	const calls = 20
	started := make(chan struct{}, calls)
	ended := make(chan error, calls)
	c := toolbustest.Start(t, toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("work.slow", func(ctx context.Context, _ *worker.Request) (any, error) {
			started <- struct{}{}
			<-ctx.Done() // at the latest at the call's deadline
			ended <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	}))
	ing := c.AddIngress(t)

	var batch []string
	for i := range calls {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"work.slow"}`, i))
	}
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ing.URL, strings.NewReader("["+strings.Join(batch, ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(schema.HeaderTimeout, "2m")
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	for range calls {
		<-started
	}

	ing.Kill()
	killed := time.Now()
	var first, last time.Duration
	for i := range calls {
		select {
		case err := <-ended:
			if !errors.Is(err, worker.ErrCallerGone) {
				t.Fatalf("call %d ended with cause %v, want %v", i, err, worker.ErrCallerGone)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d calls of the dead ingress still run a minute later", calls-i, calls)
		}
		d := time.Since(killed)
		if i == 0 {
			first = d
		}
		last = d
	}
	t.Logf("%d calls canceled %v to %v after their ingress died (a heartbeat every %v)",
		calls, first.Round(time.Millisecond), last.Round(time.Millisecond), aggregator.DefaultHeartbeat)
	// The client gives up on the dead ingress, which lets its HTTP
	// server end the request: calls it never saw acknowledged would
	// otherwise be waited for until their deadline.
	hangUp()
	<-answered
}
