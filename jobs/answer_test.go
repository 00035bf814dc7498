package jobs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// TestAnswerMessageInHistory checks that the message an answer carries
// joins the job's history after the question: the submitter's message,
// the question as the job's own, then the answer's message as the
// caller wrote it, each with the id every read gives it, and the
// failure or result after them.
func TestAnswerMessageInHistory(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker())
	id := submitJSON(t, s, `{"method":"confirm","message":{"id":"m1","text":"deploy"}}`)
	waitQuestion(t, s, id)

	if _, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(
		`{"id":%q,"answer":{"confirmed":true},"message":{"id":"m2","text":"yes","content":{"kind":"message","n":12345678901234567890}}}`, id)); rpcErr != nil {
		t.Fatalf("answer with a message = %d %s", rpcErr.Code, rpcErr.Message)
	}
	rec := waitState(t, s, id, schema.JobSucceeded)
	type said struct{ id, role, text, data string }
	var got []said
	for _, m := range rec.History {
		got = append(got, said{m.ID, string(m.Role), m.Text, string(m.Data)})
	}
	want := []said{
		{"m1", "user", "deploy", ""},
		{id + "-2", "agent", "proceed with deploy?", `{"question":"q1"}`},
		{"m2", "user", "yes", ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history = %v, want %v", got, want)
	}
	if len(rec.History) == 3 && string(rec.History[2].Content) != `{"kind":"message","n":12345678901234567890}` {
		t.Errorf("the answer's message content = %s, want it byte for byte", rec.History[2].Content)
	}
	again, _ := get(t, newService(t, js), id)
	if fmt.Sprint(again.History) != fmt.Sprint(rec.History) {
		t.Errorf("another read of the history = %v, want the first %v", again.History, rec.History)
	}
}

// TestAnswerMessageRefused checks that an answer whose message is not
// one is -32602 naming the member, adds nothing to the history, and
// leaves the job waiting for its answer.
func TestAnswerMessageRefused(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker())
	id := submit(t, s, "confirm", `{}`)
	before := waitQuestion(t, s, id)
	big := strings.Repeat("y", jobs.MaxAnswerMessageBytes)
	tests := []struct {
		name    string
		message string
		field   string
	}{
		{name: "not an object", message: `"yes"`, field: "/message"},
		{name: "no id", message: `{"text":"yes"}`, field: "/message/id"},
		{name: "empty id", message: `{"id":"","text":"yes"}`, field: "/message/id"},
		{name: "text not a string", message: `{"id":"m2","text":1}`, field: "/message/text"},
		{name: "data not an object", message: `{"id":"m2","data":[1]}`, field: "/message/data"},
		{name: "content not an object", message: `{"id":"m2","content":"x"}`, field: "/message/content"},
		{name: "too long", message: `{"id":"m2","text":"` + big + `"}`, field: "/message"},
		{name: "an id of the job's own form", message: `{"id":"` + id + `-1","text":"yes"}`, field: "/message/id"},
		{name: "an unknown member", message: `{"id":"m2","role":"agent"}`, field: "/message/role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"answer":{"confirmed":true},"message":%s}`, id, tc.message))
			if rpcErr == nil || rpcErr.Code != schema.CodeInvalidParams {
				t.Fatalf("answer = %v, want code %d", rpcErr, schema.CodeInvalidParams)
			}
			if got := errorData(t, rpcErr)["field"]; got != tc.field {
				t.Errorf("data.field = %v, want %q (%s)", got, tc.field, rpcErr.Message)
			}
			if strings.Contains(rpcErr.Message, "jobs.") {
				t.Errorf("message %q names a Go type; want the JSON value expected", rpcErr.Message)
			}
			if rec := waitQuestion(t, s, id); len(rec.History) != len(before.History) {
				t.Errorf("history after the refusal = %v, want it as it was, %v", rec.History, before.History)
			}
		})
	}
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"decline":true,"message":{"id":"m2","text":"no"}}`, id)); rpcErr != nil {
		t.Fatalf("a decline with a message after the refusals = %d %s", rpcErr.Code, rpcErr.Message)
	}
	if rec := waitState(t, s, id, schema.JobSucceeded); len(rec.History) == 0 || rec.History[len(rec.History)-1].ID != "m2" {
		t.Errorf("history = %v, want it to end with the decline's message m2", rec.History)
	}
}

// TestAnswerNamesItsQuestion checks that an answer naming a question the
// job does not wait on is -32602 naming /question and leaves the job
// waiting, while one naming the question it waits on is taken.
func TestAnswerNamesItsQuestion(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newAsker())
	id := submit(t, s, "confirm", `{}`)
	q := waitQuestion(t, s, id).Question.ID
	_, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"question":"another","answer":{"confirmed":true}}`, id))
	if rpcErr == nil || rpcErr.Code != schema.CodeInvalidParams || errorData(t, rpcErr)["field"] != "/question" {
		t.Fatalf("an answer to another question = %v, want -32602 naming /question", rpcErr)
	}
	if rec := waitQuestion(t, s, id); rec.Question.ID != q {
		t.Fatalf("after the refusal the job waits on %+v, want still %s", rec.Question, q)
	}
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsAnswer, fmt.Sprintf(`{"id":%q,"question":%q,"answer":{"confirmed":true}}`, id, q)); rpcErr != nil {
		t.Fatalf("an answer to question %s = %d %s", q, rpcErr.Code, rpcErr.Message)
	}
	waitState(t, s, id, schema.JobSucceeded)
}
