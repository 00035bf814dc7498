package a2a_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// nameSchema is the schema of the question of the tool "name": one
// member, a string, so that a text part answers it.
const nameSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`

// nameTool serves "name", which asks its caller for a name and answers it.
func nameTool(rt *worker.Runtime) error {
	return rt.HandleFunc("name", func(ctx context.Context, req *worker.Request) (any, error) {
		content, err := worker.Ask(ctx, worker.Question{Message: "what name?", Schema: json.RawMessage(nameSchema)})
		if err != nil {
			return nil, err
		}
		return content, nil
	}, worker.Asks())
}

// asking starts a cluster with jobs, discovery, authentication and the
// A2A front door serving the demo's confirm and the tool "name"; alice and
// bob may both call them.
func asking(t *testing.T) *toolbustest.Cluster {
	t.Helper()
	allow := []string{"rpc.jobs.*", "confirm", "name"}
	c := toolbustest.Start(t, toolbustest.WithTools(toolbustest.Demo), toolbustest.WithTools(nameTool),
		toolbustest.WithJobs(), toolbustest.WithDiscovery(), toolbustest.WithA2A(),
		toolbustest.WithGateway(func(c *node.GatewayConfig) { c.Jobs.CallbackAllow = []string{"127.0.0.1"} }),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: allow},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: allow},
		}}))
	waitForTools(t, c, "confirm", "name")
	return c
}

// skillCall returns a message that calls skill with params as its data
// part.
func skillCall(skill string, params map[string]any) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: params})
	m.Metadata = map[string]any{toolbusa2a.SkillKey: skill}
	return m
}

// reply returns a follow-up message to task tk.
func reply(tk *a2a.Task, parts ...a2a.Part) *a2a.Message {
	return a2a.NewMessageForTask(a2a.MessageRoleUser, tk, parts...)
}

// asked checks that tk is input-required with the question message and a
// data part carrying the question's id and a schema with member, and
// that its history holds the question under the same messageId.
func asked(t *testing.T, tk *a2a.Task, message, member string) {
	t.Helper()
	if tk.Status.State != a2a.TaskStateInputRequired || tk.Status.Message == nil {
		t.Fatalf("task = %s, want input-required with a status message", jsonOf(tk))
	}
	m := tk.Status.Message
	var text string
	var data map[string]any
	for _, p := range m.Parts {
		switch p := p.(type) {
		case a2a.TextPart:
			text = p.Text
		case a2a.DataPart:
			data = p.Data
		}
	}
	props, _ := data[toolbusa2a.QuestionSchemaKey].(map[string]any)["properties"].(map[string]any)
	if id, _ := data[toolbusa2a.QuestionIDKey].(string); m.Role != a2a.MessageRoleAgent || text != message || id == "" || props[member] == nil {
		t.Fatalf("status message = %s, want an agent message %q with the question's id and a schema with %q", jsonOf(m), message, member)
	}
	if !slices.ContainsFunc(tk.History, func(h *a2a.Message) bool {
		return h.Role == a2a.MessageRoleAgent && h.ID == m.ID && bytes.Contains([]byte(jsonOf(h)), []byte(message))
	}) {
		t.Errorf("history = %s, want the question in it under the status message's id %s", jsonOf(tk.History), m.ID)
	}
}

// getTask reads task id.
func getTask(t *testing.T, cl *a2aclient.Client, id a2a.TaskID) *a2a.Task {
	t.Helper()
	tk, err := cl.GetTask(bounded(t), &a2a.TaskQueryParams{ID: id})
	if err != nil {
		t.Fatalf("tasks/get %s: %v", id, err)
	}
	return tk
}

// rawSend posts message/send with msg to the front door as the caller
// of key and returns the JSON-RPC error of its answer.
func rawSend(t *testing.T, base, key string, msg *a2a.Message) *schema.Error {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": map[string]any{"message": msg}})
	req, err := http.NewRequestWithContext(bounded(t), http.MethodPost, base+toolbusa2a.Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(auth.APIKeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post message/send: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r schema.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("message/send answered %s: %v", b, err)
	}
	return r.Error
}

// TestAnswerBlocking checks a blocking message/send of confirm: it answers
// the task input-required with the question; an answer that does not fit
// is -32602 naming the member and the task still waits; another caller's
// answer finds no task; the answer {"confirmed": true} completes it; and
// a follow-up to the completed task is -32004.
func TestAnswerBlocking(t *testing.T) {
	c := asking(t)
	alice := client(t, c.BaseURL, "alice-key")
	bob := client(t, c.BaseURL, "bob-key")

	tk := sendTask(t, alice, send(skillCall("confirm", map[string]any{"action": "deploy"}), true))
	asked(t, tk, "proceed with deploy?", "confirmed")

	wrong := reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": "yes"}})
	if _, err := alice.SendMessage(bounded(t), send(wrong, true)); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("a wrong answer = %v, want %v", err, a2a.ErrInvalidParams)
	}
	e := rawSend(t, c.BaseURL, "alice-key", reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": 1}}))
	var data struct {
		Field string `json:"field"`
	}
	if e == nil || json.Unmarshal(e.Data, &data) != nil || e.Code != schema.CodeInvalidParams || data.Field != "/message/parts/0/data/confirmed" {
		t.Errorf("a wrong answer over HTTP = %+v, want -32602 with data.field /message/parts/0/data/confirmed", e)
	}
	if got := getTask(t, alice, tk.ID); got.Status.State != a2a.TaskStateInputRequired {
		t.Errorf("task after wrong answers = %s, want still input-required", got.Status.State)
	}

	if _, err := bob.SendMessage(bounded(t), send(reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": true}}), true)); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("another caller's answer = %v, want %v", err, a2a.ErrTaskNotFound)
	}

	done := sendTask(t, alice, send(reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": true}}), true))
	if got := jsonOf(result(t, done)); got != `{"action":"deploy","confirmed":true}` {
		t.Errorf("result = %s, want {\"action\":\"deploy\",\"confirmed\":true}", got)
	}

	if _, err := alice.SendMessage(bounded(t), send(reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": true}}), true)); !errors.Is(err, a2a.ErrUnsupportedOperation) {
		t.Errorf("a follow-up to a completed task = %v, want %v", err, a2a.ErrUnsupportedOperation)
	}
}

// TestAnswerStream checks message/stream of confirm: the stream ends with
// a final status update input-required carrying the question, and the
// answer sent as a stream ends with completed final.
func TestAnswerStream(t *testing.T) {
	c := asking(t)
	alice := client(t, c.BaseURL, "alice-key")

	evs := events(t, alice.SendStreamingMessage(bounded(t), send(skillCall("confirm", map[string]any{"action": "deploy"}), true)), func(a2a.Event) {})
	got := kinds(evs)
	last, ok := evs[len(evs)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || got[len(got)-1] != "input-required final" {
		t.Fatalf("message/stream events = %q, want them to end with input-required final", got)
	}
	tk := &a2a.Task{ID: last.TaskID, ContextID: last.ContextID, Status: last.Status}
	tk.History = getTask(t, alice, tk.ID).History
	asked(t, tk, "proceed with deploy?", "confirmed")

	evs = events(t, alice.SendStreamingMessage(bounded(t), send(reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": true}}), true)), func(a2a.Event) {})
	// The task may be completed by the time the stream reads it first:
	// then the task itself carries the artifact.
	if got := kinds(evs); len(got) < 2 || got[0] != "task" || got[len(got)-1] != "completed final" {
		t.Errorf("answer's stream events = %q, want the task, and last completed final", got)
	}
	if got := jsonOf(result(t, getTask(t, alice, tk.ID))); got != `{"action":"deploy","confirmed":true}` {
		t.Errorf("result = %s, want {\"action\":\"deploy\",\"confirmed\":true}", got)
	}
}

// TestAnswerTextAndDecline checks a text answer to a question whose
// schema has one string member, a text answer to one that has not, and a
// decline in the metadata.
func TestAnswerTextAndDecline(t *testing.T) {
	c := asking(t)
	alice := client(t, c.BaseURL, "alice-key")

	t.Run("text", func(t *testing.T) {
		tk := sendTask(t, alice, send(skillCall("name", map[string]any{}), true))
		asked(t, tk, "what name?", "name")
		done := sendTask(t, alice, send(reply(tk, a2a.TextPart{Text: "Ada"}), true))
		if got := jsonOf(result(t, done)); got != `{"name":"Ada"}` {
			t.Errorf("result = %s, want {\"name\":\"Ada\"}", got)
		}
	})
	t.Run("text to a boolean", func(t *testing.T) {
		tk := sendTask(t, alice, send(skillCall("confirm", map[string]any{"action": "text"}), true))
		asked(t, tk, "proceed with text?", "confirmed")
		if _, err := alice.SendMessage(bounded(t), send(reply(tk, a2a.TextPart{Text: "yes"}), true)); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Errorf("a text answer to confirm = %v, want %v", err, a2a.ErrInvalidParams)
		}
		if got := getTask(t, alice, tk.ID); got.Status.State != a2a.TaskStateInputRequired {
			t.Errorf("task after a text answer = %s, want still input-required", got.Status.State)
		}
		if _, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: tk.ID}); err != nil {
			t.Errorf("cancel the waiting task: %v", err)
		}
	})
	t.Run("decline", func(t *testing.T) {
		tk := sendTask(t, alice, send(skillCall("confirm", map[string]any{"action": "drop"}), true))
		asked(t, tk, "proceed with drop?", "confirmed")
		m := reply(tk, a2a.TextPart{Text: "no, thanks"})
		m.Metadata = map[string]any{toolbusa2a.DeclineKey: true}
		done := sendTask(t, alice, send(m, true))
		if got := jsonOf(result(t, done)); got != `{"action":"drop","confirmed":false,"declined":true}` {
			t.Errorf("result = %s, want the declined confirm", got)
		}
	})
}

// TestAnswerPushed checks that a push config sees the task
// input-required with its question, and then completed once answered.
func TestAnswerPushed(t *testing.T) {
	c := asking(t)
	alice := client(t, c.BaseURL, "alice-key")
	rcv := newReceiver(t)

	p := send(skillCall("confirm", map[string]any{"action": "ship"}), false)
	p.Config.PushConfig = &a2a.PushConfig{URL: rcv.url}
	tk := sendTask(t, alice, p)
	gotAsked := rcv.until(t, "the task is input-required", func(p pushed) bool {
		return p.task.ID == tk.ID && p.task.Status.State == a2a.TaskStateInputRequired
	})
	if m := gotAsked.task.Status.Message; m == nil || !bytes.Contains([]byte(jsonOf(m)), []byte("proceed with ship?")) {
		t.Errorf("pushed status = %s, want the question", jsonOf(gotAsked.task.Status))
	}
	if _, err := alice.SendMessage(bounded(t), send(reply(tk, a2a.DataPart{Data: map[string]any{"confirmed": true}}), false)); err != nil {
		t.Fatalf("answer: %v", err)
	}
	done := rcv.until(t, "the task is completed", func(p pushed) bool {
		return p.task.ID == tk.ID && p.task.Status.State == a2a.TaskStateCompleted
	})
	if got := jsonOf(result(t, &done.task)); got != `{"action":"ship","confirmed":true}` {
		t.Errorf("pushed result = %s, want %s", got, fmt.Sprintf(`{"action":%q,"confirmed":true}`, "ship"))
	}
}

// TestAnswerHistory checks that a task's history holds the question and
// then the follow-up message that answered it, as the client sent it
// (its messageId, role and parts), with the same messageIds on every
// read: historyLength 2 gives those two, and the whole history starts
// with the message that made the task.
func TestAnswerHistory(t *testing.T) {
	c := asking(t)
	alice := client(t, c.BaseURL, "alice-key")

	first := skillCall("confirm", map[string]any{"action": "deploy"})
	tk := sendTask(t, alice, send(first, true))
	asked(t, tk, "proceed with deploy?", "confirmed")
	long := reply(tk, a2a.TextPart{Text: strings.Repeat("y", jobs.MaxAnswerMessageBytes)}, a2a.DataPart{Data: map[string]any{"confirmed": true}})
	var data struct {
		Field string `json:"field"`
	}
	if e := rawSend(t, c.BaseURL, "alice-key", long); e == nil || e.Code != schema.CodeInvalidParams || json.Unmarshal(e.Data, &data) != nil || data.Field != "/message" {
		t.Errorf("an answer in a message too long to keep = %+v, want -32602 with data.field /message", e)
	}
	answer := reply(tk, a2a.TextPart{Text: "go ahead"}, a2a.DataPart{Data: map[string]any{"confirmed": true}})
	done := sendTask(t, alice, send(answer, true))
	if done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task after the answer = %s, want completed", done.Status.State)
	}

	two := 2
	var reads []string
	for range 2 {
		got, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID, HistoryLength: &two})
		if err != nil {
			t.Fatalf("tasks/get with historyLength 2: %v", err)
		}
		reads = append(reads, jsonOf(got.History))
		if len(got.History) != 2 {
			t.Fatalf("history = %s, want the question and the answer", jsonOf(got.History))
		}
		q, a := got.History[0], got.History[1]
		if q.Role != a2a.MessageRoleAgent || !bytes.Contains([]byte(jsonOf(q)), []byte("proceed with deploy?")) {
			t.Errorf("history[0] = %s, want the question", jsonOf(q))
		}
		want := `[{"kind":"text","text":"go ahead"},{"kind":"data","data":{"confirmed":true}}]`
		if a.Role != a2a.MessageRoleUser || a.ID != answer.ID || a.TaskID != tk.ID || jsonOf(a.Parts) != want {
			t.Errorf("history[1] = %s, want the answer as sent: messageId %s, role user, parts %s", jsonOf(a), answer.ID, want)
		}
	}
	if reads[0] != reads[1] {
		t.Errorf("two reads of the history differ:\n%s\n%s", reads[0], reads[1])
	}
	var ids []string
	for _, m := range getTask(t, alice, tk.ID).History {
		ids = append(ids, m.ID)
	}
	if want := []string{first.ID, string(tk.ID) + "-2", answer.ID}; !slices.Equal(ids, want) {
		t.Errorf("history messageIds = %q, want the first message, the question and the answer, %q", ids, want)
	}
}
