package toolbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

func TestJobProgressOverWebSocket(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs(),
		toolbustest.WithGateway(func(c *node.GatewayConfig) { c.Jobs.ProgressInterval = 20 * time.Millisecond }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	roundTrip := func(body string) schema.Response {
		t.Helper()
		if err := conn.Write(ctx, websocket.MessageText, []byte(body)); err != nil {
			t.Fatal(err)
		}
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r schema.Response
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("answer %s: %v", data, err)
		}
		return r
	}
	r := roundTrip(`{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"sleep","params":{"ms":800}}}`)
	var sub struct{ ID string }
	if r.Error != nil || json.Unmarshal(r.Result, &sub) != nil || sub.ID == "" {
		t.Fatalf("submit = %s %v", r.Result, r.Error)
	}
	r = roundTrip(`{"jsonrpc":"2.0","id":2,"method":"rpc.jobs.subscribe","params":{"id":"` + sub.ID + `"}}`)
	if r.Error != nil || string(r.ID) != "2" {
		t.Fatalf("subscribe = %s %v", r.Result, r.Error)
	}
	var progressed bool
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("no final notification: %v", err)
		}
		var n struct {
			Method string           `json:"method"`
			ID     any              `json:"id"`
			Params schema.JobRecord `json:"params"`
		}
		if err := json.Unmarshal(data, &n); err != nil || n.Method != schema.MethodJobsProgress || n.ID != nil {
			t.Fatalf("message %s, want an rpc.jobs.progress notification", data)
		}
		if n.Params.ID != sub.ID {
			t.Fatalf("notification for job %s, want %s", n.Params.ID, sub.ID)
		}
		if n.Params.State == schema.JobRunning && n.Params.Progress != nil && n.Params.Progress.Percent > 0 && n.Params.Progress.Percent < 100 {
			progressed = true
		}
		if n.Params.State.Final() {
			if n.Params.State != schema.JobSucceeded || string(n.Params.Result) != `{"slept_ms":800}` {
				t.Fatalf("final notification = %s %s, want succeeded", n.Params.State, n.Params.Result)
			}
			break
		}
	}
	if !progressed {
		t.Fatal("no notification carried progress while the job ran")
	}
	// Over plain HTTP the method says where it works.
	hr := c.Call(t, "rpc.jobs.subscribe", `{"id":"`+sub.ID+`"}`)
	if !errors.Is(hr.Error, schema.ErrMethodNotFound) || !strings.Contains(string(hr.Error.Data), "needs_websocket") {
		t.Fatalf("subscribe over HTTP = %+v, want -32601 needs_websocket", hr.Error)
	}
}
