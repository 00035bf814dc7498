package toolbustest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// gate registers "gate.wait", a tool that answers "opened" once open is
// closed, or fails with its context.
func gate(open <-chan struct{}, entered chan<- struct{}) func(rt *worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		return rt.HandleFunc("gate.wait", func(ctx context.Context, _ *worker.Request) (any, error) {
			entered <- struct{}{}
			select {
			case <-open:
				return "opened", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}
}

// TestSSEStreamsEachAnswer checks over the whole cluster that the fast
// call's event arrives while the slow call of the same batch still runs.
func TestSSEStreamsEachAnswer(t *testing.T) {
	open, entered := make(chan struct{}), make(chan struct{}, 1)
	c := toolbustest.Start(t, toolbustest.WithTools(toolbustest.Demo), toolbustest.WithTools(gate(open, entered)))
	req, err := http.NewRequest(http.MethodPost, c.URL, strings.NewReader(
		`[{"jsonrpc":"2.0","method":"gate.wait","id":"slow"},{"jsonrpc":"2.0","method":"sleep","params":{"ms":50},"id":"fast"}]`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() string {
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				return strings.TrimPrefix(line, "data: ")
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return ""
	}
	var r schema.Response
	if err := json.Unmarshal([]byte(next()), &r); err != nil || string(r.ID) != `"fast"` || string(r.Result) != `{"slept_ms":50}` {
		t.Fatalf("first event = %+v, %v, want the fast call's result", r, err)
	}
	<-entered // the slow call is running, and cannot end before open
	close(open)
	if err := json.Unmarshal([]byte(next()), &r); err != nil || string(r.ID) != `"slow"` || string(r.Result) != `"opened"` {
		t.Errorf("second event = %+v, %v, want the slow call's result", r, err)
	}
	if d := next(); d != `{"answers":2}` {
		t.Errorf("done event data = %s, want 2 answers", d)
	}
}

// TestWebSocketCluster runs calls over one connection: a fast call is
// answered while a slow one runs, and rpc.cancel ends the slow one -32004.
func TestWebSocketCluster(t *testing.T) {
	open, entered := make(chan struct{}), make(chan struct{}, 1)
	defer close(open)
	c := toolbustest.Start(t, toolbustest.WithTools(toolbustest.Demo), toolbustest.WithTools(gate(open, entered)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), nil)
	if err != nil {
		t.Fatalf("Dial() error = %v", err)
	}
	defer ws.CloseNow()
	write := func(msg string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("Write() error = %v", err)
		}
	}
	read := func() schema.Response {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("Read() error = %v", err)
		}
		var r schema.Response
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("answer %s: %v", b, err)
		}
		return r
	}
	write(`{"jsonrpc":"2.0","method":"gate.wait","id":1}`)
	<-entered
	write(`{"jsonrpc":"2.0","method":"echo","params":{"n":2},"id":2}`)
	if r := read(); string(r.ID) != "2" || string(r.Result) != `{"n":2}` {
		t.Fatalf("first answer = %+v, want the echo while call 1 runs", r)
	}
	write(`{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":1},"id":3}`)
	got := map[string]schema.Response{}
	for range 2 {
		r := read()
		got[string(r.ID)] = r
	}
	if r := got["3"]; string(r.Result) != `{"canceled":true}` {
		t.Errorf("rpc.cancel answer = %+v, want canceled true", r)
	}
	if r := got["1"]; r.Error == nil || r.Error.Code != schema.CodeCanceled {
		t.Errorf("canceled call answer = %+v, want -32004", r)
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// TestRESTCluster checks the REST adapter's statuses over the whole
// cluster.
func TestRESTCluster(t *testing.T) {
	c := toolbustest.Start(t)
	tests := []struct {
		name, tool, body, timeout string
		wantStatus                int
		wantCode                  int
	}{
		{name: "success", tool: "echo", body: `{"hello":"world"}`, wantStatus: 200},
		{name: "no worker serves it", tool: "nope", wantStatus: 404, wantCode: schema.CodeMethodNotFound},
		{name: "tool's own code", tool: "fail", body: `{"code":2001,"message":"insufficient funds"}`, wantStatus: 422, wantCode: 2001},
		{name: "invalid params", tool: "sleep", body: `{"ms":"x"}`, wantStatus: 400, wantCode: schema.CodeInvalidParams},
		{name: "timed out", tool: "sleep", body: `{"ms":5000}`, timeout: "100ms", wantStatus: 504, wantCode: schema.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, c.BaseURL+"/v1/tools/"+tt.tool+"/invoke", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(ingress.RequestIDHeader, "test-1")
			if tt.timeout != "" {
				req.Header.Set(schema.HeaderTimeout, tt.timeout)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var a struct {
				Success   bool
				Error     *schema.Error
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatalf("answer %s: %v", b, err)
			}
			if resp.StatusCode != tt.wantStatus || a.Success != (tt.wantStatus == 200) || a.RequestID != "test-1" {
				t.Fatalf("POST %s = %d %s, want %d", tt.tool, resp.StatusCode, b, tt.wantStatus)
			}
			if tt.wantCode != 0 && (a.Error == nil || a.Error.Code != tt.wantCode) {
				t.Errorf("error = %+v, want code %d", a.Error, tt.wantCode)
			}
		})
	}
}

// TestJSONRPC1Cluster checks 1.0 answers over the whole cluster, on and
// off.
func TestJSONRPC1Cluster(t *testing.T) {
	const body = `{"method":"subtract","params":[42,23],"id":1}`
	on := toolbustest.Start(t, toolbustest.WithGateway(func(c *node.GatewayConfig) {
		c.JSONRPC1 = true
	}))
	if _, got := on.Post(t, body); string(got) != `{"result":19,"error":null,"id":1}` {
		t.Errorf("1.0 on: answer %s, want the 1.0 form", got)
	}
	off := toolbustest.Start(t)
	if r := off.Batch(t, "["+body+"]"); len(r) != 1 || r[0].Error == nil || r[0].Error.Code != schema.CodeInvalidRequest {
		t.Errorf("1.0 off: answer %+v, want -32600", r)
	}
}
