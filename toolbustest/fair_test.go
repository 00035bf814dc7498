package toolbustest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// ledger is what the worker of the fairness tests saw: every call of
// "work", in the order it started, by caller.
type ledger struct {
	mu    sync.Mutex
	order []string // callers, in the order their calls started
	ids   map[string]bool
	flood atomic.Int64 // the flood's calls started so far
	// at is, per call of the victim's, how many calls of the flood had
	// started when it did.
	at []int64
}

// tools registers "work", which records its call and holds it for
// {"ms"} milliseconds (or until its deadline).
func (l *ledger) tools(rt *worker.Runtime) error {
	return rt.HandleFunc("work", func(ctx context.Context, req *worker.Request) (any, error) {
		var p struct {
			MS int `json:"ms"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.order = append(l.order, req.Caller)
		l.ids[req.Caller+" "+string(req.ID)] = true
		if req.Caller == "flood" {
			l.flood.Add(1)
		} else {
			l.at = append(l.at, l.flood.Load())
		}
		l.mu.Unlock()
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return "worked", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

func (l *ledger) saw(caller, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[caller+" "+id]
}

func (l *ledger) started() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order)
}

// fairCluster starts a cluster whose ingress authenticates "flood" and
// "victim" and shares itself among them as f says.
func fairCluster(t *testing.T, f ingress.Fairness) (*toolbustest.Cluster, *ledger) {
	t.Helper()
	l := &ledger{ids: map[string]bool{}}
	c := toolbustest.Start(t, toolbustest.WithTools(l.tools), toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "flood", SHA256: auth.HashAPIKey("flood-key"), Allow: []string{"work"}},
		{Name: "victim", SHA256: auth.HashAPIKey("victim-key"), Allow: []string{"work"}},
	}}), toolbustest.WithGateway(func(c *node.GatewayConfig) {
		c.Fair = !f.Off
		c.FairSeats, c.FairHoldMin, c.FairHoldMax = f.Seats, f.HoldMin, f.HoldMax
		c.FairCPUTarget, c.CallerMaxQueued = f.CPUTarget, f.CallerMaxQueued
	}))
	return c, l
}

// postAs sends body with key and returns its answers.
func postAs(ctx context.Context, url, key, body string, header ...string) ([]schema.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(auth.APIKeyHeader, key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b.Bytes())
	}
	if bytes.HasPrefix(bytes.TrimSpace(b.Bytes()), []byte("[")) {
		var rs []schema.Response
		return rs, json.Unmarshal(b.Bytes(), &rs)
	}
	var r schema.Response
	return []schema.Response{r}, json.Unmarshal(b.Bytes(), &r)
}

func workBatch(n, ms int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"work","params":{"ms":%d}}`, i, ms)
	}
	return b.String() + "]"
}

// TestFairFloodAndVictim: while one caller floods the ingress with
// batches of 500 calls on four connections, another's single calls, sent
// one after the other, each start at the worker after a few of the
// flood's (about the window's seats), not after the flood's backlog.
func TestFairFloodAndVictim(t *testing.T) {
	const seats, floodConns, batch, victimCalls, floodMS = 4, 4, 500, 20, 50
	c, l := fairCluster(t, ingress.Fairness{Seats: seats, HoldMin: time.Minute, HoldMax: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var floods sync.WaitGroup
	for range floodConns {
		floods.Go(func() {
			// Each call of the flood takes far longer than the victim's
			// way from its client to its caller's queue, so that what is
			// counted is the order of admission, not how fast the
			// victim's request is read on a busy machine.
			rs, err := postAs(ctx, c.URL, "flood-key", workBatch(batch, floodMS))
			if ctx.Err() != nil {
				return // the test is done with it
			}
			if err != nil {
				t.Errorf("the flood's batch: %v", err)
				return
			}
			for _, r := range rs {
				if r.Error != nil {
					t.Errorf("the flood's call %s: %v", r.ID, r.Error)
					return
				}
			}
		})
	}
	toolbustest.Eventually(t, func() bool { return l.flood.Load() >= 2*seats }, "the flood's calls are running")

	var most int64
	for i := range victimCalls {
		before := l.flood.Load()
		rs, err := postAs(ctx, c.URL, "victim-key", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"work","params":{"ms":0}}`, i))
		if err != nil || rs[0].Error != nil {
			t.Fatalf("the victim's call %d: %v %v", i, err, rs)
		}
		l.mu.Lock()
		after := l.at[i]
		l.mu.Unlock()
		// The victim's call waits for the calls in the window, and for
		// as many of the flood's as it takes turns with: a few seats'
		// worth, never the flood's backlog of up to 2000.
		ran := after - before
		most = max(most, ran)
		if ran > 3*seats {
			t.Errorf("the victim's call %d started after %d calls of the flood, want at most %d (the flood has %d queued)",
				i, ran, 3*seats, floodConns*batch-int(after))
		}
	}
	t.Logf("a call of the victim started after at most %d of the flood's", most)
	if left := floodConns*batch - int(l.flood.Load()); left < 10*seats {
		t.Fatalf("the flood had only %d calls left when the victim was done: the test proved nothing, give the flood more work", left)
	}
	cancel()
	floods.Wait()
}

// TestFairQueueTimeout: the calls whose deadline comes while they wait in
// their caller's queue are answered -32001 by the ingress and never
// reach the worker.
func TestFairQueueTimeout(t *testing.T) {
	const calls, ms = 50, 20
	c, l := fairCluster(t, ingress.Fairness{Seats: 1, HoldMin: time.Minute, HoldMax: time.Minute})
	rs, err := postAs(t.Context(), c.URL, "flood-key", workBatch(calls, ms), schema.HeaderTimeout, "100ms")
	if err != nil {
		t.Fatal(err)
	}
	var ok, timedOut, queuedOut int
	for _, r := range rs {
		switch {
		case r.Error == nil:
			ok++
		case r.Error.Code == schema.CodeTimeout:
			timedOut++
			if !l.saw("flood", string(r.ID)) {
				queuedOut++
			}
		default:
			t.Errorf("call %s answered %v, want a result or -32001", r.ID, r.Error)
		}
	}
	// One window seat: at most one call can time out while running.
	if queuedOut < timedOut-1 || queuedOut < calls/2 {
		t.Errorf("%d calls timed out, %d of them in the queue; want all but the one running, and most of the %d", timedOut, queuedOut, calls)
	}
	// None is sent to the worker afterwards: a call sent now is the next
	// the worker sees.
	before := l.started()
	if rs, err := postAs(t.Context(), c.URL, "flood-key", `{"jsonrpc":"2.0","id":"last","method":"work","params":{"ms":0}}`); err != nil || rs[0].Error != nil {
		t.Fatalf("a call after the batch: %v %v", err, rs)
	}
	if got := l.started() - before; got != 1 {
		t.Errorf("the worker started %d calls since the batch was answered, want only the one sent since", got)
	}
	if got := l.started() - 1; got != ok+timedOut-queuedOut {
		t.Errorf("the worker started %d calls of the batch, want %d (answered %d, timed out running %d)", got, ok+timedOut-queuedOut, ok, timedOut-queuedOut)
	}
}
