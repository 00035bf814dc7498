package toolbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jsonEqual compares two JSON texts as values.
func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	if len(got) == 0 && want == "" {
		return true
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("answer %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q is not JSON: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

// stripMessages removes error messages and data so answers compare by code
// and id, as the specification's examples give only those.
func stripMessages(t *testing.T, body []byte) []byte {
	t.Helper()
	if len(body) == 0 {
		return body
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("answer %q is not JSON: %v", body, err)
	}
	strip := func(m map[string]any) {
		if e, ok := m["error"].(map[string]any); ok {
			delete(e, "message")
			delete(e, "data")
		}
	}
	switch x := v.(type) {
	case map[string]any:
		strip(x)
	case []any:
		for _, it := range x {
			if m, ok := it.(map[string]any); ok {
				strip(m)
			}
		}
	}
	out, _ := json.Marshal(v)
	return out
}

// TestSpecificationExamples sends every example of section 7 of the
// JSON-RPC 2.0 specification through the whole cluster.
func TestSpecificationExamples(t *testing.T) {
	c := toolbustest.Start(t)
	for _, tc := range []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"positional", `{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}`, 200,
			`{"jsonrpc": "2.0", "result": 19, "id": 1}`},
		{"positional reversed", `{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}`, 200,
			`{"jsonrpc": "2.0", "result": -19, "id": 2}`},
		{"named", `{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}`, 200,
			`{"jsonrpc": "2.0", "result": 19, "id": 3}`},
		{"named reordered", `{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}`, 200,
			`{"jsonrpc": "2.0", "result": 19, "id": 4}`},
		{"notification", `{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}`, 204, ``},
		{"notification of unknown method", `{"jsonrpc": "2.0", "method": "foobar"}`, 204, ``},
		{"unknown method", `{"jsonrpc": "2.0", "method": "foobar", "id": "1"}`, 200,
			`{"jsonrpc": "2.0", "error": {"code": -32601}, "id": "1"}`},
		{"invalid JSON", `{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`, 200,
			`{"jsonrpc": "2.0", "error": {"code": -32700}, "id": null}`},
		{"invalid request object", `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`, 200,
			`{"jsonrpc": "2.0", "error": {"code": -32600}, "id": null}`},
		{"batch of invalid JSON", `[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]`, 200, `{"jsonrpc": "2.0", "error": {"code": -32700}, "id": null}`},
		{"empty array", `[]`, 200, `{"jsonrpc": "2.0", "error": {"code": -32600}, "id": null}`},
		{"invalid batch of one", `[1]`, 200, `[{"jsonrpc": "2.0", "error": {"code": -32600}, "id": null}]`},
		{"invalid batch", `[1,2,3]`, 200, `[
  {"jsonrpc": "2.0", "error": {"code": -32600}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600}, "id": null}]`},
		{"mixed batch", `[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
  {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
  {"foo": "boo"},
  {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
  {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
]`, 200, `[
  {"jsonrpc": "2.0", "result": 7, "id": "1"},
  {"jsonrpc": "2.0", "result": 19, "id": "2"},
  {"jsonrpc": "2.0", "error": {"code": -32600}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32601}, "id": "5"},
  {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}]`},
		{"all notifications", `[
  {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
  {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
]`, 204, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := c.Post(t, tc.body)
			if status != tc.status {
				t.Fatalf("POST %s = HTTP %d %s, want %d", tc.body, status, body, tc.status)
			}
			if got := stripMessages(t, body); !jsonEqual(t, got, tc.want) {
				t.Fatalf("POST %s = %s, want %s", tc.body, got, tc.want)
			}
		})
	}
}

func TestIDsEchoedByteForByte(t *testing.T) {
	c := toolbustest.Start(t)
	for _, id := range []string{`"101"`, `101`, `12345678901234567890`, `-0.5e10`, `null`, `"\u00e9\n"`} {
		t.Run(id, func(t *testing.T) {
			_, body := c.Post(t, `{"jsonrpc":"2.0","method":"echo","params":[1],"id":`+id+`}`)
			want := `"id":` + id + `}`
			if !strings.HasSuffix(string(body), want) {
				t.Fatalf("answer %s does not end with %s", body, want)
			}
		})
	}
}

func TestSlowBackendCostsOnlyItsOwnSlot(t *testing.T) {
	c := toolbustest.Start(t)
	start := time.Now()
	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":{"n":1}},
		{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":20000}},
		{"jsonrpc":"2.0","id":3,"method":"sha256","params":{"data":"x","rounds":10}},
		{"jsonrpc":"2.0","id":4,"method":"echo","params":{"n":4}}
	]`, "Toolbus-Timeout", "300ms")
	took := time.Since(start)
	if len(rs) != 4 {
		t.Fatalf("got %d responses, want 4", len(rs))
	}
	for _, i := range []int{0, 2, 3} {
		if rs[i].Error != nil {
			t.Errorf("response %s = %v, want a result", rs[i].ID, rs[i].Error)
		}
	}
	if !errors.Is(rs[1].Error, schema.ErrTimeout) {
		t.Fatalf("slow call = %v, want timeout", rs[1].Error)
	}
	if !strings.Contains(string(rs[1].Error.Data), `"retryable":true`) {
		t.Errorf("timeout data = %s, want retryable", rs[1].Error.Data)
	}
	if took > 10*time.Second {
		t.Fatalf("batch took %v, want about its 300ms deadline", took)
	}
}

func TestWorkerKilledDuringCall(t *testing.T) {
	c := toolbustest.Start(t)
	started := make(chan struct{}, 1)
	victim := c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("hang", func(ctx context.Context, _ *worker.Request) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	go func() {
		<-started
		victim.Kill()
	}()
	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":"a","method":"hang"},
		{"jsonrpc":"2.0","id":"b","method":"echo","params":["still here"]}
	]`, "Toolbus-Timeout", "1s")
	if !errors.Is(rs[0].Error, schema.ErrTimeout) {
		t.Fatalf("call held by the killed worker = %v, want timeout", rs[0].Error)
	}
	if rs[1].Error != nil || string(rs[1].Result) != `["still here"]` {
		t.Fatalf("other call = %s %v, want its result", rs[1].Result, rs[1].Error)
	}
	// New calls of the method find no worker at once.
	r := c.Call(t, "hang", "", "Toolbus-Timeout", "10s")
	if !errors.Is(r.Error, schema.ErrMethodNotFound) {
		t.Fatalf("call after the kill = %v, want method not found (no responders)", r.Error)
	}
}

func TestNoRespondersAnswersAtOnce(t *testing.T) {
	c := toolbustest.Start(t)
	start := time.Now()
	r := c.Call(t, "nobody.home", `{}`)
	if !errors.Is(r.Error, schema.ErrMethodNotFound) {
		t.Fatalf("call = %v, want method not found", r.Error)
	}
	if !strings.Contains(string(r.Error.Data), "no_responders") {
		t.Errorf("data = %s, want reason no_responders", r.Error.Data)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("no-responders answer took %v, want well before the 30s deadline", took)
	}
}

func TestNotificationRunsTheTool(t *testing.T) {
	var ran atomic.Int32
	done := make(chan struct{}, 1)
	c := toolbustest.Start(t, toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("tick", func(ctx context.Context, req *worker.Request) (any, error) {
			if req.IsNotification() {
				ran.Add(1)
				done <- struct{}{}
			}
			return "ignored", nil
		})
	}))
	status, body := c.Post(t, `{"jsonrpc":"2.0","method":"tick","params":[1]}`)
	if status != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("notification = HTTP %d %q, want 204 and no body", status, body)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the notification never ran the tool")
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("tool ran %d times, want 1", n)
	}
}

func TestPanicInToolIsInternalError(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithTools(toolbustest.Demo), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("explode", func(context.Context, *worker.Request) (any, error) {
			panic("kaboom")
		})
	}))
	r := c.Call(t, "explode", "")
	if !errors.Is(r.Error, schema.ErrInternal) {
		t.Fatalf("panicking tool = %v, want internal error", r.Error)
	}
	if strings.Contains(r.Error.Message+string(r.Error.Data), "goroutine") {
		t.Fatalf("reply leaks a stack: %s %s", r.Error.Message, r.Error.Data)
	}
	if r := c.Call(t, "echo", `[1]`); r.Error != nil {
		t.Fatalf("call after the panic = %v, want the worker still serving", r.Error)
	}
}

func TestToolErrorsPassThrough(t *testing.T) {
	c := toolbustest.Start(t)
	r := c.Call(t, "fail", `{"code":2001,"message":"insufficient funds","data":{"balance":3}}`)
	if r.Error == nil || r.Error.Code != 2001 || r.Error.Message != "insufficient funds" || string(r.Error.Data) != `{"balance":3}` {
		t.Fatalf("fail = %+v, want code 2001 with its message and data", r.Error)
	}
	r = c.Call(t, "sleep", `{"ms":"long"}`)
	if !errors.Is(r.Error, schema.ErrInvalidParams) || !strings.Contains(string(r.Error.Data), "ms") {
		t.Fatalf("sleep with bad params = %+v, want invalid params naming ms", r.Error)
	}
}

func TestLimitsNameThemselves(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithGateway(func(c *node.GatewayConfig) {
		c.Limits = ingress.Limits{
			MaxBodyBytes: 2048, MaxBatchItems: 3, MaxDepth: 5,
		}
	}))
	call := `{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}`
	for _, tc := range []struct {
		name   string
		body   string
		status int
		limit  string
	}{
		{"batch items", "[" + strings.Repeat(call+",", 3) + call + "]", 200, "max_batch_items"},
		{"body bytes", `{"jsonrpc":"2.0","id":1,"method":"echo","params":["` + strings.Repeat("x", 4096) + `"]}`, 413, "max_body_bytes"},
		{"depth", `{"jsonrpc":"2.0","id":1,"method":"echo","params":[[[[[[1]]]]]]}`, 200, "max_depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := c.Post(t, tc.body)
			if status != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", status, tc.status, body)
			}
			var r schema.Response
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
			if !errors.Is(r.Error, schema.ErrLimitExceeded) || !strings.Contains(string(r.Error.Data), tc.limit) {
				t.Fatalf("answer = %+v, want -32006 naming %s", r.Error, tc.limit)
			}
		})
	}
}

func TestFanOutOfSleepingCalls(t *testing.T) {
	c := toolbustest.Start(t)
	const n = 256
	calls := make([]string, n)
	for i := range calls {
		calls[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sleep","params":{"ms":200}}`, i)
	}
	start := time.Now()
	rs := c.Batch(t, "["+strings.Join(calls, ",")+"]")
	took := time.Since(start)
	if len(rs) != n {
		t.Fatalf("got %d responses, want %d", len(rs), n)
	}
	for i, r := range rs {
		if r.Error != nil || string(r.ID) != fmt.Sprint(i) || string(r.Result) != `{"slept_ms":200}` {
			t.Fatalf("response %d = id %s %s %v, want id %d and slept_ms 200", i, r.ID, r.Result, r.Error, i)
		}
	}
	// 256 sleeps of 200ms run concurrently; in series they would take 51s.
	if took > 20*time.Second {
		t.Fatalf("fan-out took %v, want the sleeps to overlap", took)
	}
}

func TestOverloadIsRefusedWithRetryHint(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithGateway(func(c *node.GatewayConfig) {
		c.MaxInFlight = 2
		// A caller's queue stays as long as the fair scheduler's own
		// default, not --max-in-flight's.
		c.CallerMaxQueued = fair.DefaultFlowMaxQueued
	}))
	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":300}},
		{"jsonrpc":"2.0","id":2,"method":"sleep","params":{"ms":300}},
		{"jsonrpc":"2.0","id":3,"method":"sleep","params":{"ms":300}},
		{"jsonrpc":"2.0","id":4,"method":"sleep","params":{"ms":300}}
	]`)
	overloaded := 0
	for _, r := range rs {
		if errors.Is(r.Error, schema.ErrOverloaded) {
			overloaded++
			if !strings.Contains(string(r.Error.Data), "retry_after_ms") {
				t.Errorf("overload data = %s, want retry_after_ms", r.Error.Data)
			}
		} else if r.Error != nil {
			t.Errorf("response %s = %v", r.ID, r.Error)
		}
	}
	if overloaded != 2 {
		t.Fatalf("%d calls refused, want 2 over max_in_flight 2", overloaded)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	c := toolbustest.Start(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(c.BaseURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d, want 200", path, resp.StatusCode)
		}
	}
}
