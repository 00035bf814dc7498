package conform_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// TestForeignWorkerThroughIngress runs synchronous calls and jobs end to
// end, over HTTP through a real ingress, on the foreign worker alone: jobs
// reach it as calls, so it runs them without a JetStream client.
func TestForeignWorkerThroughIngress(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithoutWorker(), toolbustest.WithDiscovery(), toolbustest.WithJobs())
	nc, err := nats.Connect("", nats.InProcessServer(c.NATS.Server()), nats.Name("foreign-worker"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := startForeign(nc, "toolbus")
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(w.stop)

	t.Run("call", func(t *testing.T) {
		r := c.Call(t, "conform.echo", `{"big":12345678901234567890}`)
		want := `{"id":1,"method":"conform.echo","params":{"big":12345678901234567890}}`
		if r.Error != nil || !sameJSONText(r.Result, want) {
			t.Errorf("conform.echo = %s, %v; want %s", r.Result, r.Error, want)
		}
	})
	t.Run("batch", func(t *testing.T) {
		rs := c.Batch(t, `[
			{"jsonrpc":"2.0","id":"s","method":"conform.sleep","params":{"ms":200}},
			{"jsonrpc":"2.0","id":2,"method":"conform.echo","params":[2]},
			{"jsonrpc":"2.0","id":3,"method":"conform.fail"},
			{"jsonrpc":"2.0","id":4,"method":"conform.panic"},
			{"jsonrpc":"2.0","method":"conform.echo","params":["a notification"]}
		]`)
		if len(rs) != 4 {
			t.Fatalf("%d responses, want 4 (the notification gets none)", len(rs))
		}
		if string(rs[0].ID) != `"s"` || !sameJSONText(rs[0].Result, `{"slept_ms":200}`) {
			t.Errorf("sleep: id %s result %s error %v", rs[0].ID, rs[0].Result, rs[0].Error)
		}
		if string(rs[1].ID) != "2" || !sameJSONText(rs[1].Result, `{"id":2,"method":"conform.echo","params":[2]}`) {
			t.Errorf("echo: id %s result %s error %v", rs[1].ID, rs[1].Result, rs[1].Error)
		}
		if e := rs[2].Error; e == nil || e.Code != 2001 || !sameJSONText(e.Data, `{"conform":"fail"}`) {
			t.Errorf("fail: %v, want code 2001 with its data", e)
		}
		if e := rs[3].Error; e == nil || e.Code != schema.CodeInternal {
			t.Errorf("panic: %v, want -32603", e)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		r := c.Call(t, "conform.sleep", `{"ms":5000}`, "Toolbus-Timeout", "200ms")
		if r.Error == nil || r.Error.Code != schema.CodeTimeout {
			t.Errorf("conform.sleep past its deadline = %s, %v; want -32001", r.Result, r.Error)
		}
	})
	t.Run("job with progress", func(t *testing.T) {
		toolbustest.Eventually(t, func() bool {
			_, body := c.Post(t, `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`)
			return strings.Contains(string(body), "conform.progress")
		}, "the ingress knows the foreign worker's tools")
		id := submitJob(t, c, `{"method":"conform.progress"}`)
		rec := waitJob(t, c, id, func(r schema.JobRecord) bool { return r.State.Final() })
		if rec.State != schema.JobSucceeded || !sameJSONText(rec.Result, `{"done":true}`) {
			t.Fatalf("job = %s %s %v, want succeeded with {\"done\":true}", rec.State, rec.Result, rec.Error)
		}
		if rec.Progress == nil || rec.Progress.Percent != 50 || rec.Progress.Message != "halfway" {
			t.Errorf("job progress = %+v, want the worker's report of 50%% halfway", rec.Progress)
		}
	})
	t.Run("job canceled", func(t *testing.T) {
		id := submitJob(t, c, `{"method":"conform.sleep","params":{"ms":60000}}`)
		waitJob(t, c, id, func(r schema.JobRecord) bool { return r.State == schema.JobRunning })
		if r := c.Call(t, "rpc.jobs.cancel", `{"id":"`+id+`"}`); r.Error != nil {
			t.Fatalf("rpc.jobs.cancel = %v", r.Error)
		}
		rec := waitJob(t, c, id, func(r schema.JobRecord) bool { return r.State.Final() })
		if rec.State != schema.JobCanceled {
			t.Fatalf("canceled job ended %s %v, want canceled", rec.State, rec.Error)
		}
	})
	t.Run("discovery", func(t *testing.T) {
		toolbustest.Eventually(t, func() bool {
			_, body := c.Post(t, `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`)
			return strings.Contains(string(body), "conform.progress")
		}, "rpc.discover lists the foreign worker's tools")
	})
}

func submitJob(t *testing.T, c *toolbustest.Cluster, params string) string {
	t.Helper()
	r := c.Call(t, "rpc.jobs.submit", params)
	var sub schema.JobSubmitResult
	if r.Error != nil || json.Unmarshal(r.Result, &sub) != nil || sub.ID == "" {
		t.Fatalf("rpc.jobs.submit %s = %s, %v", params, r.Result, r.Error)
	}
	return sub.ID
}

func waitJob(t *testing.T, c *toolbustest.Cluster, id string, ok func(schema.JobRecord) bool) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		r := c.Call(t, "rpc.jobs.get", `{"id":"`+id+`"}`)
		if r.Error != nil || json.Unmarshal(r.Result, &rec) != nil {
			return false
		}
		return ok(rec)
	}, "job "+id+" reaches the state the test waits for")
	return rec
}

func sameJSONText(got json.RawMessage, want string) bool {
	var g, w any
	dec := json.NewDecoder(strings.NewReader(string(got)))
	dec.UseNumber()
	if dec.Decode(&g) != nil {
		return false
	}
	dec = json.NewDecoder(strings.NewReader(want))
	dec.UseNumber()
	if dec.Decode(&w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}
