package toolbustest_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// submitConfirm submits a job of the demo's confirm and returns its id.
func submitConfirm(t *testing.T, c *toolbustest.Cluster, header ...string) string {
	t.Helper()
	r := c.Call(t, schema.MethodJobsSubmit, `{"method":"confirm","params":{"action":"deploy"}}`, header...)
	var sub schema.JobSubmitResult
	if r.Error != nil || json.Unmarshal(r.Result, &sub) != nil || sub.ID == "" {
		t.Fatalf("submit confirm = %s %v", r.Result, r.Error)
	}
	return sub.ID
}

// readJob reads job id's record with rpc.jobs.get.
func readJob(t *testing.T, c *toolbustest.Cluster, id string, header ...string) schema.JobRecord {
	t.Helper()
	r := c.Call(t, schema.MethodJobsGet, fmt.Sprintf(`{"id":%q}`, id), header...)
	var rec schema.JobRecord
	if r.Error != nil || json.Unmarshal(r.Result, &rec) != nil {
		t.Fatalf("get %s = %s %v", id, r.Result, r.Error)
	}
	return rec
}

// waitAsked waits until job id is input_required with confirm's question.
func waitAsked(t *testing.T, c *toolbustest.Cluster, id string, header ...string) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		rec = readJob(t, c, id, header...)
		if rec.State.Final() {
			t.Fatalf("job %s ended %s %s %v before it was asked", id, rec.State, rec.Result, rec.Error)
		}
		return rec.State == schema.JobInputRequired
	}, "job "+id+" asks its question")
	if q := rec.Question; q == nil || q.Message != "proceed with deploy?" || !json.Valid(q.Schema) || q.ID == "" {
		t.Fatalf("question = %+v, want confirm's", q)
	}
	return rec
}

// waitEnded waits until job id is final.
func waitEnded(t *testing.T, c *toolbustest.Cluster, id string, header ...string) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		rec = readJob(t, c, id, header...)
		return rec.State.Final()
	}, "job "+id+" ends")
	return rec
}

func answerJob(t *testing.T, c *toolbustest.Cluster, id, members string, header ...string) schema.Response {
	t.Helper()
	return c.Call(t, schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,%s}`, id, members), header...)
}

func TestConfirmAnswered(t *testing.T) {
	tests := []struct {
		name    string
		members string
		want    string
	}{
		{name: "confirmed", members: `"answer":{"confirmed":true}`, want: `{"action":"deploy","confirmed":true}`},
		{name: "not confirmed", members: `"answer":{"confirmed":false}`, want: `{"action":"deploy","confirmed":false}`},
		{name: "declined", members: `"decline":true`, want: `{"action":"deploy","confirmed":false,"declined":true}`},
	}
	c := toolbustest.Start(t, toolbustest.WithJobs())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := submitConfirm(t, c)
			waitAsked(t, c, id)
			if r := answerJob(t, c, id, tc.members); r.Error != nil {
				t.Fatalf("answer = %v", r.Error)
			}
			rec := waitEnded(t, c, id)
			if rec.State != schema.JobSucceeded || string(rec.Result) != tc.want || rec.Question != nil {
				t.Fatalf("job = %s %s %v question %+v, want succeeded %s", rec.State, rec.Result, rec.Error, rec.Question, tc.want)
			}
		})
	}
}

func TestConfirmWrongAnswerKeepsTheJobWaiting(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	id := submitConfirm(t, c)
	waitAsked(t, c, id)
	r := answerJob(t, c, id, `"answer":{"confirmed":"yes"}`)
	var data struct {
		Field string `json:"field"`
	}
	if r.Error == nil || r.Error.Code != schema.CodeInvalidParams || json.Unmarshal(r.Error.Data, &data) != nil || data.Field != "/answer/confirmed" {
		t.Fatalf("wrong answer = %v, want -32602 naming /answer/confirmed", r.Error)
	}
	if rec := readJob(t, c, id); rec.State != schema.JobInputRequired || rec.Question == nil {
		t.Fatalf("job after a wrong answer = %s question %+v, want still input_required", rec.State, rec.Question)
	}
	if r := answerJob(t, c, id, `"answer":{"confirmed":true}`); r.Error != nil {
		t.Fatalf("right answer = %v", r.Error)
	}
	if rec := waitEnded(t, c, id); string(rec.Result) != `{"action":"deploy","confirmed":true}` {
		t.Fatalf("job = %s %s %v, want confirmed", rec.State, rec.Result, rec.Error)
	}
}

func TestConfirmUnansweredFails(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs(), toolbustest.WithGateway(func(c *node.GatewayConfig) { c.Jobs.MaxRunTime = 2 * time.Second }))
	id := submitConfirm(t, c)
	waitAsked(t, c, id)
	rec := waitEnded(t, c, id)
	if rec.State != schema.JobFailed || rec.Error.Reason() != schema.ReasonQuestionUnanswered || rec.Question != nil {
		t.Fatalf("job = %s %v question %+v, want failed %s without a question", rec.State, rec.Error, rec.Question, schema.ReasonQuestionUnanswered)
	}
}

func TestConfirmAnswerOfAnotherCallerRefused(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs(), toolbustest.WithAuth(auth.Config{
		Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"confirm", "rpc.jobs.*"}},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"confirm", "rpc.jobs.*"}},
		},
	}))
	alice := []string{"Authorization", "Bearer alice-key"}
	id := submitConfirm(t, c, alice...)
	waitAsked(t, c, id, alice...)
	r := answerJob(t, c, id, `"answer":{"confirmed":true}`, "Authorization", "Bearer bob-key")
	if r.Error == nil || r.Error.Code != schema.CodeJobNotFound {
		t.Fatalf("bob's answer to alice's job = %v, want %d as for get", r.Error, schema.CodeJobNotFound)
	}
	if rec := readJob(t, c, id, alice...); rec.State != schema.JobInputRequired {
		t.Fatalf("job after bob's answer = %s, want still input_required", rec.State)
	}
	if r := answerJob(t, c, id, `"answer":{"confirmed":true}`, alice...); r.Error != nil {
		t.Fatalf("alice's answer = %v", r.Error)
	}
	if rec := waitEnded(t, c, id, alice...); string(rec.Result) != `{"action":"deploy","confirmed":true}` {
		t.Fatalf("job = %s %s %v, want confirmed", rec.State, rec.Result, rec.Error)
	}
}

func TestConfirmCalledSynchronouslyCannotAsk(t *testing.T) {
	c := toolbustest.Start(t)
	start := time.Now()
	r := c.Call(t, "confirm", `{"action":"deploy"}`)
	if r.Error == nil || r.Error.Code != schema.CodeToolError || r.Error.Reason() != schema.ReasonCannotAsk {
		t.Fatalf("synchronous confirm = %s %v, want -32000 %s", r.Result, r.Error, schema.ReasonCannotAsk)
	}
	// At once: well within the default timeout a waiting call would run to.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("synchronous confirm answered after %v, want at once", d)
	}
}

func TestConfirmWorkerKilledWhileAsking(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	id := submitConfirm(t, c)
	waitAsked(t, c, id)
	c.Worker.Kill()
	rec := waitEnded(t, c, id)
	if rec.State != schema.JobFailed || rec.Error.Reason() != schema.ReasonInterruptedNotRetryable || rec.Question != nil {
		t.Fatalf("job = %s %v question %+v, want failed %s without a question", rec.State, rec.Error, rec.Question, schema.ReasonInterruptedNotRetryable)
	}
}
