package toolbustest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// getJob polls rpc.jobs.get on url until the job is final.
func getJob(t *testing.T, c *toolbustest.Cluster, url, id string) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		status, body := c.PostURL(t, url, `{"jsonrpc":"2.0","id":"g","method":"rpc.jobs.get","params":{"id":"`+id+`"}}`)
		var r schema.Response
		if status != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Error != nil {
			t.Fatalf("rpc.jobs.get = HTTP %d %s", status, body)
		}
		rec = schema.JobRecord{}
		if err := json.Unmarshal(r.Result, &rec); err != nil {
			t.Fatal(err)
		}
		return rec.State.Final()
	}, "job "+id+" ends")
	return rec
}

func TestJobSubmittedOnOneIngressPolledOnAnother(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	other := c.AddIngress(t)
	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"sleep","params":{"ms":50}}},
		{"jsonrpc":"2.0","id":2,"method":"echo","params":["sync, next to it"]},
		{"jsonrpc":"2.0","id":3,"method":"rpc.jobs.get","params":{"id":"00000000000000000000000000"}}
	]`)
	if rs[0].Error != nil {
		t.Fatalf("submit = %v", rs[0].Error)
	}
	var sub struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	// A worker may take the job before submit answers.
	if err := json.Unmarshal(rs[0].Result, &sub); err != nil || sub.ID == "" || (sub.State != "queued" && sub.State != "running") {
		t.Fatalf("submit result = %s, want an id in state queued or running", rs[0].Result)
	}
	if rs[1].Error != nil || string(rs[1].Result) != `["sync, next to it"]` {
		t.Fatalf("sync call in the same batch = %s %v", rs[1].Result, rs[1].Error)
	}
	if !errors.Is(rs[2].Error, schema.ErrJobNotFound) {
		t.Fatalf("get of an unknown id = %v, want job not found", rs[2].Error)
	}
	rec := getJob(t, c, other.URL, sub.ID)
	if rec.State != schema.JobSucceeded || string(rec.Result) != `{"slept_ms":50}` || rec.Attempts != 1 {
		t.Fatalf("job polled on the other ingress = %s %s attempts %d, want succeeded {\"slept_ms\":50} once", rec.State, rec.Result, rec.Attempts)
	}
}

func TestPreferRespondAsyncPromotesASlowCall(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	// The list of tools served as jobs is refreshed every two seconds;
	// wait until sleep is on it, as a client would retry.
	var r schema.Response
	toolbustest.Eventually(t, func() bool {
		r = c.Call(t, "sleep", `{"ms":1500}`, "Toolbus-Timeout", "300ms", "Prefer", "respond-async")
		return r.Error != nil && strings.Contains(string(r.Error.Data), "job_id")
	}, "a slow call with Prefer: respond-async is answered with a job_id")
	if !errors.Is(r.Error, schema.ErrTimeout) {
		t.Fatalf("promoted call = %v, want -32001", r.Error)
	}
	var data struct {
		JobID string `json:"job_id"`
	}
	json.Unmarshal(r.Error.Data, &data)
	rec := getJob(t, c, c.URL, data.JobID)
	if rec.State != schema.JobSucceeded || string(rec.Result) != `{"slept_ms":1500}` {
		t.Fatalf("promoted job = %s %s, want succeeded with the call's result", rec.State, rec.Result)
	}
	// A fast call with the same header is answered as usual.
	if r := c.Call(t, "echo", `[1]`, "Prefer", "respond-async"); r.Error != nil || string(r.Result) != "[1]" {
		t.Fatalf("fast call with Prefer = %s %v, want its result", r.Result, r.Error)
	}
	// Without the header a slow call just times out.
	if r := c.Call(t, "sleep", `{"ms":1500}`, "Toolbus-Timeout", "300ms"); !errors.Is(r.Error, schema.ErrTimeout) || strings.Contains(string(r.Error.Data), "job_id") {
		t.Fatalf("slow call without Prefer = %+v, want a plain timeout", r.Error)
	}
}

func TestJobsOverREST(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	resp, err := http.Post(c.BaseURL+"/v1/tools/rpc.jobs.get/invoke", "application/json", strings.NewReader(`{"id":"00000000000000000000000000"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("REST get of an unknown job = %d, want 404", resp.StatusCode)
	}
}
