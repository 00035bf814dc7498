package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/coder/websocket"
	"github.com/nats-io/nats.go/jetstream"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// holds are gates by name, for the tool hold {"key"}, which opens the
// gate "<key> entered", reports 50% and then waits for the gate of its
// key.
type holds struct {
	mu    sync.Mutex
	gates map[string]*gate
	// opened is set by openAll: a gate made afterwards, by a call that
	// started late, is open at once.
	opened bool
}

func (h *holds) gate(key string) *gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gates == nil {
		h.gates = map[string]*gate{}
	}
	if h.gates[key] == nil {
		h.gates[key] = newGate()
		if h.opened {
			h.gates[key].open()
		}
	}
	return h.gates[key]
}

// openAll opens every gate, and every one made from now on.
func (h *holds) openAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opened = true
	for _, g := range h.gates {
		g.open()
	}
}

func (h *holds) register(rt *worker.Runtime) error {
	return rt.HandleFunc("hold", func(ctx context.Context, req *worker.Request) (any, error) {
		var p struct{ Key string }
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		h.gate(p.Key + " entered").open()
		worker.Progress(ctx, 50, "holding "+p.Key)
		select {
		case <-h.gate(p.Key).wait():
			return map[string]any{"key": p.Key}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// The flood of one caller's subscriptions: floodWS over WebSocket
// connections of floodPerConn each (under ws_max_in_flight), and
// floodStreams A2A streams.
const (
	floodWS       = 1000
	floodPerConn  = 250
	floodStreams  = 100
	floodRaisedTo = 2000
)

// recordConsumers returns the JetStream consumers of the cluster's bucket
// of job records, as the server counts them. (The queue of jobs has a
// consumer per caller, which a subscription does not change.)
func recordConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	st, err := js.Stream(bounded(t), "KV_toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(bounded(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// wsSubscribe opens a WebSocket as the caller of key, subscribes it n
// times to job id and returns how many subscriptions were answered. It
// fails at any answer but the record and -32002 naming
// caller_max_subscriptions. The connection stays open until the test
// ends.
func wsSubscribe(t *testing.T, ctx context.Context, url, key, id string, n int) (int, error) {
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), &websocket.DialOptions{
		HTTPHeader: http.Header{auth.APIKeyHeader: {key}}})
	if err != nil {
		return 0, err
	}
	ws.SetReadLimit(1 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	for i := range n {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"rpc.jobs.subscribe","params":{"id":%q}}`, i, id)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			return 0, err
		}
	}
	ok := 0
	for answered := 0; answered < n; {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return ok, fmt.Errorf("read after %d answers: %w", answered, err)
		}
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *schema.Error   `json:"error"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return ok, fmt.Errorf("message %s: %w", data, err)
		}
		switch {
		case m.ID == nil: // a notification
			continue
		case m.Error == nil:
			ok++
		case m.Error.Code != schema.CodeOverloaded || m.Error.Limit() != "caller_max_subscriptions":
			return ok, fmt.Errorf("subscribe answered %s, want the record or -32002 naming caller_max_subscriptions", data)
		}
		answered++
	}
	return ok, nil
}

// a2aStream opens tasks/resubscribe of task id as the caller of key and
// reads its first event: it reports whether the stream is open (its first
// event the task), and otherwise returns the error it answered. The
// stream stays open until the test ends.
func a2aStream(t *testing.T, ctx context.Context, hc *http.Client, base, key, id string) (bool, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tasks/resubscribe","params":{"id":"` + id + `"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+toolbusa2a.Path, strings.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(auth.APIKeyHeader, key)
	res, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	t.Cleanup(func() { res.Body.Close() })
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Result struct {
				Kind string `json:"kind"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return false, fmt.Errorf("event %s: %w", line, err)
		}
		if ev.Error != nil {
			return false, fmt.Errorf("refused: %s", ev.Error)
		}
		if ev.Result.Kind != "task" {
			return false, fmt.Errorf("first event %s, want the task", line)
		}
		return true, nil
	}
	return false, fmt.Errorf("the stream ended without an event: %v", sc.Err())
}

// TestOneCallersSubscriptionsLeaveOthersAlone floods an ingress with
// 1,100 subscriptions of one caller to its own job, over WebSockets and
// A2A streams, with the default bound of subscriptions per caller (most
// are refused, naming caller_max_subscriptions) and with a bound above
// the flood (all are open). Either way another caller's subscription, A2A
// stream and blocking send follow its jobs to their end, and the
// JetStream consumers of the jobs stay as many as with one subscription.
func TestOneCallersSubscriptionsLeaveOthersAlone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bounds   func(c *node.GatewayConfig)
		wantOpen int
	}{
		{name: "default bound", bounds: func(*node.GatewayConfig) {}, wantOpen: jobs.DefaultCallerMaxSubscriptions},
		{name: "bound above the flood", bounds: func(c *node.GatewayConfig) {
			c.Jobs.MaxSubscriptions, c.Jobs.CallerMaxSubscriptions = 2*floodRaisedTo, floodRaisedTo
		}, wantOpen: floodWS + floodStreams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h holds
			c := toolbustest.Start(t, toolbustest.WithTools(h.register), toolbustest.WithJobs(), toolbustest.WithGateway(tc.bounds),
				toolbustest.WithDiscovery(), toolbustest.WithA2A(),
				toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
					{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"rpc.jobs.*", "hold"}},
					{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"rpc.jobs.*", "hold"}},
				}}))
			t.Cleanup(h.openAll)
			waitForTools(t, c, "hold")
			nc, err := c.NATS.Connect()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx := bounded(t)
			alice, bob := client(t, c.BaseURL, "alice-key"), client(t, c.BaseURL, "bob-key")

			hog := sendTask(t, alice, send(call("hold", map[string]any{"key": "alice"}), false))
			before := recordConsumers(t, js)
			if ok, err := wsSubscribe(t, ctx, c.URL, "alice-key", string(hog.ID), 1); ok != 1 || err != nil {
				t.Fatalf("alice's first subscription: %d open, %v", ok, err)
			}
			// The watch of the records starts with the first follower, on
			// a goroutine of its own.
			warm := before + 1
			toolbustest.Eventually(t, func() bool { return recordConsumers(t, js) == warm },
				"the ingress watches the job records, with one consumer more than before")

			open := 1
			var mu sync.Mutex
			var wg sync.WaitGroup
			for left := floodWS - 1; left > 0; left -= floodPerConn {
				wg.Go(func() {
					ok, err := wsSubscribe(t, ctx, c.URL, "alice-key", string(hog.ID), min(left, floodPerConn))
					if err != nil {
						t.Errorf("alice's subscriptions over a WebSocket: %v", err)
					}
					mu.Lock()
					open += ok
					mu.Unlock()
				})
			}
			wg.Wait()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floodStreams}}
			t.Cleanup(hc.CloseIdleConnections)
			for range floodStreams {
				wg.Go(func() {
					ok, err := a2aStream(t, ctx, hc, c.BaseURL, "alice-key", string(hog.ID))
					if !ok && (err == nil || !strings.Contains(err.Error(), "caller_max_subscriptions")) {
						t.Errorf("alice's A2A stream: %v, want it open or refused naming caller_max_subscriptions", err)
					}
					if ok {
						mu.Lock()
						open++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if open != tc.wantOpen {
				t.Errorf("alice has %d subscriptions open of the %d she asked for, want %d", open, floodWS+floodStreams, tc.wantOpen)
			}
			if n := recordConsumers(t, js); n != warm {
				t.Errorf("consumers of the job records with %d subscriptions open = %d, want %d as with one", open, n, warm)
			}

			// Bob subscribes over a WebSocket, streams and sends blocking.
			job := sendTask(t, bob, send(call("hold", map[string]any{"key": "bob-ws"}), false))
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), &websocket.DialOptions{
				HTTPHeader: http.Header{auth.APIKeyHeader: {"bob-key"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			msg := `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.subscribe","params":{"id":"` + string(job.ID) + `"}}`
			if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			for done := false; !done; {
				_, data, err := ws.Read(ctx)
				if err != nil {
					t.Fatalf("bob's subscription ended before his job: %v", err)
				}
				var m struct {
					ID     json.RawMessage   `json:"id"`
					Error  *schema.Error     `json:"error"`
					Params *schema.JobRecord `json:"params"`
				}
				if err := json.Unmarshal(data, &m); err != nil || m.Error != nil {
					t.Fatalf("bob's subscription: %s", data)
				}
				if m.ID != nil {
					h.gate("bob-ws").open()
					continue
				}
				done = m.Params != nil && m.Params.State.Final()
				if done && m.Params.State != schema.JobSucceeded {
					t.Fatalf("bob's job ended %s, want succeeded", m.Params.State)
				}
			}

			var last a2a.Event
			for ev, err := range bob.SendStreamingMessage(ctx, send(call("hold", map[string]any{"key": "bob-stream"}), true)) {
				if err != nil {
					t.Fatalf("bob's A2A stream: %v", err)
				}
				h.gate("bob-stream").open()
				last = ev
			}
			if up, ok := last.(*a2a.TaskStatusUpdateEvent); !ok || !up.Final || up.Status.State != a2a.TaskStateCompleted {
				t.Errorf("bob's A2A stream ended with %s, want the task completed", jsonOf(last))
			}

			go func() {
				select {
				case <-h.gate("bob-send entered").wait():
					h.gate("bob-send").open()
				case <-ctx.Done():
				}
			}()
			tk := sendTask(t, bob, send(call("hold", map[string]any{"key": "bob-send"}), true))
			if tk.Status.State != a2a.TaskStateCompleted {
				t.Errorf("bob's blocking send = %s, want the task completed", jsonOf(tk))
			}
			if n := recordConsumers(t, js); n != warm {
				t.Errorf("consumers of the jobs after bob's follows = %d, want %d", n, warm)
			}
		})
	}
}

// TestAtItsBoundNoTaskIsMade checks that a caller at its bound of
// subscriptions is refused a blocking send and a stream before their task
// exists: a refusal never comes with a task that runs anyway, which a
// client that retries would run twice. A non-blocking send, which
// follows nothing, still makes its task.
func TestAtItsBoundNoTaskIsMade(t *testing.T) {
	var h holds
	c := toolbustest.Start(t, toolbustest.WithTools(h.register), toolbustest.WithDiscovery(),
		toolbustest.WithJobs(), toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Jobs.MaxSubscriptions, c.Jobs.CallerMaxSubscriptions = 100, 2
		}),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"rpc.jobs.*", "hold"}},
		}}))
	t.Cleanup(h.openAll) // before the cluster stops: its jobs end
	waitForTools(t, c, "hold")
	ctx := bounded(t)
	alice := client(t, c.BaseURL, "alice-key")
	tasks := func() int {
		t.Helper()
		r := c.Call(t, schema.MethodJobsList, `{"limit":100}`, auth.APIKeyHeader, "alice-key")
		var l struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &l) != nil {
			t.Fatalf("rpc.jobs.list = %s %v", r.Result, r.Error)
		}
		return len(l.Jobs)
	}

	hog := sendTask(t, alice, send(call("hold", map[string]any{"key": "hog"}), false))
	if open, err := wsSubscribe(t, ctx, c.URL, "alice-key", string(hog.ID), 2); open != 2 || err != nil {
		t.Fatalf("alice's two subscriptions: %d open, %v", open, err)
	}
	before := tasks()
	if _, err := alice.SendMessage(ctx, send(call("hold", map[string]any{"key": "refused-send"}), true)); err == nil ||
		!strings.Contains(err.Error(), "caller_max_subscriptions") {
		t.Errorf("blocking message/send at the bound = %v, want refused naming caller_max_subscriptions", err)
	}
	for _, err := range alice.SendStreamingMessage(ctx, send(call("hold", map[string]any{"key": "refused-stream"}), true)) {
		if err == nil || !strings.Contains(err.Error(), "caller_max_subscriptions") {
			t.Errorf("message/stream at the bound = %v, want refused naming caller_max_subscriptions", err)
		}
		break
	}
	if after := tasks(); after != before {
		t.Errorf("alice's tasks after two refused follows = %d, want %d as before: a refused send made its task", after, before)
	}
	if tk := sendTask(t, alice, send(call("hold", map[string]any{"key": "not-following"}), false)); tk.Status.State.Terminal() {
		t.Errorf("non-blocking send at the bound = %s, want a task not final yet", jsonOf(tk))
	}
	if after := tasks(); after != before+1 {
		t.Errorf("alice's tasks after a non-blocking send = %d, want %d", after, before+1)
	}
}
