package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// asker is an Invoker whose one tool asks the job's caller a question
// through the call's Ask, as the aggregator hands a worker's question
// over, and answers what it was answered; lose, when it is closed while
// the tool waits, cuts the run off as the loss of its worker would.
type asker struct {
	answers chan schema.Answer
	lose    chan struct{}
}

var _ jobs.Invoker = (*asker)(nil)

const askSchema = `{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`

func newAsker() *asker {
	return &asker{answers: make(chan schema.Answer, 4), lose: make(chan struct{})}
}

func (a *asker) Methods() []string            { return []string{"confirm"} }
func (a *asker) RetrySafe(string) bool        { return false }
func (a *asker) answer(x schema.Answer) error { a.answers <- x; return nil }

func (a *asker) Invoke(ctx context.Context, call schema.Call, _ func(float64, string)) (json.RawMessage, error) {
	if call.Ask == nil {
		return nil, schema.NewError(schema.CodeToolError, "cannot ask", map[string]any{"reason": schema.ReasonCannotAsk})
	}
	call.Ask(schema.Question{ID: "q1", Message: "proceed with deploy?", Schema: json.RawMessage(askSchema)}, a.answer)
	select {
	case x := <-a.answers:
		return json.Marshal(x)
	case <-a.lose:
		return nil, &jobs.InterruptedError{Err: schema.NewError(schema.CodeUnavailable, "worker lost",
			map[string]any{"reason": schema.ReasonWorkerLost})}
	case <-ctx.Done():
		return nil, schema.NewError(schema.CodeTimeout, "timed out", nil)
	}
}

// waitQuestion waits until job id is input_required with its question.
func waitQuestion(t *testing.T, s *jobs.Service, id string) *schema.JobRecord {
	t.Helper()
	rec := waitState(t, s, id, schema.JobInputRequired)
	if q := rec.Question; q == nil || q.ID != "q1" || q.Message != "proceed with deploy?" || string(q.Schema) != askSchema || q.AskedAt.IsZero() {
		t.Fatalf("question on the record = %+v, want q1 with its message, schema and time", q)
	}
	return rec
}

func TestAnswerReachesTheTool(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   string
	}{
		{name: "accept", params: `"answer":{"confirmed":true}`, want: `{"id":"q1","action":"accept","content":{"confirmed":true}}`},
		{name: "decline", params: `"decline":true`, want: `{"id":"q1","action":"decline"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startServer(t, "")
			_, js := connect(t, e)
			s := newService(t, js)
			startRunner(t, js, newAsker())
			id := submit(t, s, "confirm", `{}`)
			waitQuestion(t, s, id)
			res, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,%s}`, id, tc.params))
			if rpcErr != nil {
				t.Fatalf("answer = %d %s", rpcErr.Code, rpcErr.Message)
			}
			var after schema.JobRecord
			if err := json.Unmarshal(res, &after); err != nil || after.State != schema.JobRunning || after.Question != nil {
				t.Fatalf("answer's record = %s, want running without a question", res)
			}
			rec := waitState(t, s, id, schema.JobSucceeded)
			if string(rec.Result) != tc.want || rec.Question != nil {
				t.Fatalf("job = %s question %+v, want %s without a question", rec.Result, rec.Question, tc.want)
			}
		})
	}
}

func TestAnswerRefused(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker())
	id := submit(t, s, "confirm", `{}`)
	tests := []struct {
		name   string
		caller string
		params string
		code   int
		field  string
	}{
		{name: "wrong type", params: `{"id":%q,"answer":{"confirmed":"yes"}}`, code: schema.CodeInvalidParams, field: "/answer/confirmed"},
		{name: "missing member", params: `{"id":%q,"answer":{}}`, code: schema.CodeInvalidParams, field: "/answer/confirmed"},
		{name: "unknown member", params: `{"id":%q,"answer":{"confirmed":true,"x":1}}`, code: schema.CodeInvalidParams, field: "/answer/x"},
		{name: "neither", params: `{"id":%q}`, code: schema.CodeInvalidParams, field: "/answer"},
		{name: "both", params: `{"id":%q,"answer":{"confirmed":true},"decline":true}`, code: schema.CodeInvalidParams, field: "/answer"},
		{name: "another caller", caller: "mallory", params: `{"id":%q,"answer":{"confirmed":true}}`, code: schema.CodeJobNotFound},
	}
	waitQuestion(t, s, id)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, rpcErr := rpc(t, s, tc.caller, schema.MethodJobsAnswer, fmt.Sprintf(tc.params, id))
			if rpcErr == nil || rpcErr.Code != tc.code {
				t.Fatalf("answer = %v, want code %d", rpcErr, tc.code)
			}
			if tc.field != "" {
				if got := errorData(t, rpcErr)["field"]; got != tc.field {
					t.Errorf("data.field = %v, want %q", got, tc.field)
				}
			}
			waitQuestion(t, s, id) // still waiting
		})
	}
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"answer":{"confirmed":false}}`, id)); rpcErr != nil {
		t.Fatalf("answer after refusals = %d %s", rpcErr.Code, rpcErr.Message)
	}
	rec := waitState(t, s, id, schema.JobSucceeded)
	if want := `{"id":"q1","action":"accept","content":{"confirmed":false}}`; string(rec.Result) != want {
		t.Fatalf("job = %s, want %s", rec.Result, want)
	}
	_, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"answer":{"confirmed":true}}`, id))
	if rpcErr == nil || rpcErr.Code != schema.CodeInvalidParams || errorData(t, rpcErr)["field"] != "/id" {
		t.Fatalf("answer of a finished job = %v, want -32602 naming /id", rpcErr)
	}
}

func TestQuestionUnansweredFailsTheJob(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker(), jobs.WithMaxRunTime(time.Second))
	id := submit(t, s, "confirm", `{}`)
	waitQuestion(t, s, id)
	rec := waitState(t, s, id, schema.JobFailed)
	if rec.Error == nil || rec.Error.Code != schema.CodeTimeout || rec.Error.Reason() != schema.ReasonQuestionUnanswered || rec.Question != nil {
		t.Fatalf("job = %+v question %+v, want -32001 %s without a question", rec.Error, rec.Question, schema.ReasonQuestionUnanswered)
	}
}

func TestQuestionWithdrawnWhenTheWorkerIsLost(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	a := newAsker()
	startRunner(t, js, a)
	id := submit(t, s, "confirm", `{}`)
	waitQuestion(t, s, id)
	close(a.lose)
	rec := waitState(t, s, id, schema.JobFailed)
	if rec.Error.Reason() != schema.ReasonInterruptedNotRetryable || rec.Question != nil {
		t.Fatalf("job = %+v question %+v, want %s without a question", rec.Error, rec.Question, schema.ReasonInterruptedNotRetryable)
	}
}

// TestSubmitThatCannotAsk checks that a job submitted with can_ask false
// runs without Ask, so its tool fails to ask at once rather than wait.
func TestSubmitThatCannotAsk(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker())
	id := submitJSON(t, s, `{"method":"confirm","params":{},"can_ask":false}`)
	rec := waitState(t, s, id, schema.JobFailed)
	if rec.Error.Reason() != schema.ReasonCannotAsk || rec.Question != nil {
		t.Fatalf("job = %s %v question %+v, want failed %s without a question", rec.State, rec.Error, rec.Question, schema.ReasonCannotAsk)
	}
}
