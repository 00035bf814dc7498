package a2a_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// ids sums up a history: each message's role and id.
func ids(ms []*a2a.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Role)+" "+m.ID)
	}
	return out
}

func length(n int) *int { return &n }

// TestHistory checks that a task keeps its messages (the client's own,
// then what the tool said in words) with stable messageIds, that
// historyLength 0, 1 and absent give none, the last and all of them on
// message/send and tasks/get, that two reads agree on every messageId
// (the status message's too), and that a second ingress reads the same
// history.
func TestHistory(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	alice := client(t, c.BaseURL, "alice-key")

	// A working task: its status message says "halfway", and reads the
	// same twice.
	m := call("slow", nil)
	tk := sendTask(t, alice, send(m, false))
	var first *a2a.Task
	toolbustest.Eventually(t, func() bool {
		cur, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
		first = cur
		return err == nil && progressed(cur)
	}, "the slow task is halfway")
	second, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
	if err != nil || second.Status.Message == nil || second.Status.Message.ID != first.Status.Message.ID {
		t.Fatalf("status message of two reads = %s, %s; want the same messageId", jsonOf(first.Status.Message), jsonOf(second))
	}
	if got := ids(first.History); len(got) != 2 || got[0] != "user "+m.ID || got[1] != "agent "+first.Status.Message.ID {
		t.Errorf("history of the working task = %q, want the client's message %s and the agent's halfway, the status message", got, m.ID)
	}
	g.open()

	em := call("echo", map[string]any{"n": 1})
	done := sendTask(t, alice, send(em, true))
	if got := ids(done.History); len(got) != 1 || got[0] != "user "+em.ID {
		t.Errorf("history of a blocking send without historyLength = %q, want the client's message %s", got, em.ID)
	}
	toolbustest.Eventually(t, func() bool {
		cur, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
		return err == nil && cur.Status.State == a2a.TaskStateCompleted
	}, "the slow task completes")

	whole, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    *int
		want []string
	}{
		{name: "absent", want: ids(whole.History)},
		{name: "0", n: length(0), want: nil},
		{name: "1", n: length(1), want: ids(whole.History)[1:]},
		{name: "more than there are", n: length(10), want: ids(whole.History)},
	} {
		t.Run("tasks/get historyLength "+tc.name, func(t *testing.T) {
			got, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID, HistoryLength: tc.n})
			if err != nil || !slices.Equal(ids(got.History), tc.want) {
				t.Errorf("tasks/get historyLength %s = %q, %v; want %q", tc.name, ids(got.History), err, tc.want)
			}
		})
		t.Run("message/send historyLength "+tc.name, func(t *testing.T) {
			p := send(call("slow", nil), true)
			p.Config.HistoryLength = tc.n
			got := sendTask(t, alice, p)
			all, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: got.ID})
			if err != nil {
				t.Fatal(err)
			}
			want := ids(all.History)
			switch {
			case tc.n == nil:
			case *tc.n == 0:
				want = nil
			case *tc.n < len(want):
				want = want[len(want)-*tc.n:]
			}
			if !slices.Equal(ids(got.History), want) {
				t.Errorf("message/send historyLength %s = %q, want %q", tc.name, ids(got.History), want)
			}
		})
	}
	if len(whole.History) != 2 || whole.History[1].ID != first.Status.Message.ID {
		t.Errorf("history of the completed task = %q, want the client's message and the halfway of its working status (%s)", ids(whole.History), first.Status.Message.ID)
	}

	// A failed task: its status message is the last of its history.
	failed := sendTask(t, alice, send(call("fail", nil), true))
	again, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: failed.ID})
	if err != nil || failed.Status.Message == nil || again.Status.Message == nil || again.Status.Message.ID != failed.Status.Message.ID {
		t.Fatalf("status message of a failed task, sent then read = %s, %s; want the same messageId", jsonOf(failed.Status.Message), jsonOf(again))
	}
	if h := again.History; len(h) != 2 || h[1].ID != again.Status.Message.ID || !strings.Contains(jsonOf(h[1]), `"code":2001`) {
		t.Errorf("history of a failed task = %s, want the client's message then the failure, the status message", jsonOf(h))
	}

	// Any replica reads the same history.
	other := client(t, c.AddIngress(t).BaseURL, "alice-key")
	there, err := other.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
	if err != nil || !slices.Equal(ids(there.History), ids(whole.History)) || jsonOf(there.History) != jsonOf(whole.History) {
		t.Errorf("history read on another ingress = %s, %v; want %s", jsonOf(there.History), err, jsonOf(whole.History))
	}
}

// TestHistoryBound checks that a history stays within jobs.MaxHistoryBytes:
// a message over the budget is dropped at once, and the task says how many
// of its oldest messages went in its metadata.
func TestHistoryBound(t *testing.T) {
	c := open(t)
	text := strings.Repeat("t", jobs.MaxHistoryBytes)
	status, b := postRaw(t, c, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"big",`+
		`"role":"user","parts":[{"kind":"text","text":"`+text+`"}]}}}`)
	var resp struct {
		Result a2a.Task `json:"result"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || status != http.StatusOK {
		t.Fatalf("message/send of a big message = %d %.300s", status, b)
	}
	tk := resp.Result
	if len(tk.History) != 0 || tk.Metadata[toolbusa2a.MetaHistoryDropped] != float64(1) || tk.Status.State != a2a.TaskStateCompleted {
		t.Errorf("task of a message over the history's budget = history %q, metadata %v, %s; want no history, %s 1, completed",
			ids(tk.History), tk.Metadata, tk.Status.State, toolbusa2a.MetaHistoryDropped)
	}
}

// TestContexts checks, with the SDK's client, that a message in a known
// context starts a new task in it, its referenceTaskIds kept and returned
// (in the task's metadata and its first message, and on the job), and
// that a message naming a task is refused as A2A says: a task in a
// terminal state -32004 naming the state, a working one -32004, another
// caller's and an unknown one -32001 alike, a contextId that is not the
// task's -32602.
func TestContexts(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	alice := client(t, c.BaseURL, "alice-key")
	bob := client(t, c.BaseURL, "bob-key")

	m := call("echo", map[string]any{"turn": 1})
	m.ContextID = "conv-1"
	first := sendTask(t, alice, &a2a.MessageSendParams{Message: m})
	next := call("echo", map[string]any{"turn": 2})
	next.ContextID, next.ReferenceTasks = "conv-1", []a2a.TaskID{first.ID}
	second := sendTask(t, alice, &a2a.MessageSendParams{Message: next})
	if second.ID == first.ID || second.ContextID != "conv-1" || second.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("second message in conv-1 = %s, want a new completed task in conv-1", jsonOf(second))
	}
	if refs, _ := second.Metadata[toolbusa2a.MetaReferenceTaskIDs].([]any); len(refs) != 1 || refs[0] != string(first.ID) {
		t.Errorf("metadata of the second task = %v, want %s [%s]", second.Metadata, toolbusa2a.MetaReferenceTaskIDs, first.ID)
	}
	got, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: second.ID})
	if err != nil || len(got.History) == 0 || !slices.Equal(got.History[0].ReferenceTasks, []a2a.TaskID{first.ID}) || got.History[0].ID != next.ID {
		t.Errorf("tasks/get of the second task = %s, %v; want its first message %s referencing %s", jsonOf(got), err, next.ID, first.ID)
	}
	job := c.Call(t, schema.MethodJobsGet, `{"id":"`+string(second.ID)+`"}`, auth.APIKeyHeader, "alice-key")
	var rec schema.JobRecord
	if job.Error != nil || json.Unmarshal(job.Result, &rec) != nil || !slices.Equal(rec.References, []string{string(first.ID)}) || rec.ContextID != "conv-1" {
		t.Errorf("rpc.jobs.get of the second task = %s %v, want references [%s] in context conv-1", job.Result, job.Error, first.ID)
	}

	working := sendTask(t, alice, send(call("slow", nil), false))
	untilProgressed(t, alice, working.ID)
	bobs := sendTask(t, bob, send(call("echo", nil), true))
	followUp := func(id a2a.TaskID, contextID string) *a2a.MessageSendParams {
		m := call("echo", nil)
		m.TaskID, m.ContextID = id, contextID
		return &a2a.MessageSendParams{Message: m}
	}
	var notFound []string
	for _, tc := range []struct {
		name string
		p    *a2a.MessageSendParams
		want error
		says string
	}{
		{name: "to a completed task", p: followUp(first.ID, ""), want: a2a.ErrUnsupportedOperation, says: "completed"},
		{name: "to a completed task in its context", p: followUp(first.ID, "conv-1"), want: a2a.ErrUnsupportedOperation, says: "completed"},
		{name: "to a working task", p: followUp(working.ID, ""), want: a2a.ErrUnsupportedOperation, says: "working"},
		{name: "in another context than the task's", p: followUp(first.ID, "conv-2"), want: a2a.ErrInvalidParams, says: "contextId"},
		{name: "to another caller's task", p: followUp(bobs.ID, ""), want: a2a.ErrTaskNotFound},
		{name: "to a task that never was", p: followUp("06h3000000000000000000000a", ""), want: a2a.ErrTaskNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := alice.SendMessage(bounded(t), tc.p)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("message/send %s = %v, want %v saying %q", tc.name, err, tc.want, tc.says)
			}
			if tc.want == a2a.ErrTaskNotFound {
				notFound = append(notFound, strings.ReplaceAll(err.Error(), string(tc.p.Message.TaskID), "<id>"))
			}
		})
	}
	if len(notFound) == 2 && notFound[0] != notFound[1] {
		t.Errorf("another caller's task and one that never was = %q, want the same words", notFound)
	}
	g.open()
}

// TestLifecycle checks the lifecycle as the SDK defines it: a send
// without configuration.blocking blocks until the task is final;
// tasks/cancel of a completed or failed task is -32002 naming its state,
// and of a canceled task answers the task; a stream ends with a status
// update marked final, also for a task final from its start.
func TestLifecycle(t *testing.T) {
	c := secured(t, newGate())
	alice := client(t, c.BaseURL, "alice-key")

	status, b := c.PostURL(t, c.BaseURL+toolbusa2a.Path, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":`+
		`{"kind":"message","messageId":"nb","role":"user","parts":[{"kind":"data","data":{"method":"echo","params":{}}}]}}}`,
		auth.APIKeyHeader, "alice-key")
	if status != http.StatusOK || !strings.Contains(string(b), `"state":"completed"`) {
		t.Errorf("message/send without configuration = %d %.300s, want the completed task", status, b)
	}
	if tk := sendTask(t, alice, &a2a.MessageSendParams{Message: call("echo", nil)}); tk.Status.State != a2a.TaskStateCompleted {
		t.Errorf("message/send of the SDK's client without blocking = %s, want completed", tk.Status.State)
	}

	completed := sendTask(t, alice, send(call("echo", nil), true))
	failed := sendTask(t, alice, send(call("fail", nil), true))
	canceled := sendTask(t, alice, send(call("slow", nil), false))
	if tk, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: canceled.ID}); err != nil || tk.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("tasks/cancel of a working task = %s, %v; want canceled", jsonOf(tk), err)
	}
	for _, tc := range []struct {
		name  string
		id    a2a.TaskID
		state a2a.TaskState
	}{
		{"completed", completed.ID, a2a.TaskStateCompleted},
		{"failed", failed.ID, a2a.TaskStateFailed},
	} {
		t.Run("cancel "+tc.name, func(t *testing.T) {
			_, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: tc.id})
			if !errors.Is(err, a2a.ErrTaskNotCancelable) || !strings.Contains(err.Error(), string(tc.state)) {
				t.Errorf("tasks/cancel of a %s task = %v, want %v naming %s", tc.name, err, a2a.ErrTaskNotCancelable, tc.state)
			}
		})
	}
	t.Run("cancel canceled", func(t *testing.T) {
		tk, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: canceled.ID})
		if err != nil || tk.ID != canceled.ID || tk.Status.State != a2a.TaskStateCanceled {
			t.Errorf("tasks/cancel of a canceled task = %s, %v; want the canceled task", jsonOf(tk), err)
		}
	})

	lastFinal := func(evs []a2a.Event) bool {
		last, ok := evs[len(evs)-1].(*a2a.TaskStatusUpdateEvent)
		return ok && last.Final && last.Status.State.Terminal()
	}
	evs := events(t, alice.SendStreamingMessage(bounded(t), send(call("echo", nil), true)), func(a2a.Event) {})
	if !lastFinal(evs) {
		t.Errorf("message/stream of echo = %q, want it to end with a status update marked final", kinds(evs))
	}
	evs = events(t, alice.ResubscribeToTask(bounded(t), &a2a.TaskIDParams{ID: completed.ID}), func(a2a.Event) {})
	if got := kinds(evs); len(got) != 2 || got[0] != "task" || !lastFinal(evs) {
		t.Errorf("tasks/resubscribe of a completed task = %q, want the task and a final status update", got)
	}
}

// untilProgressed returns once task id's stream shows the slow tool
// halfway, so the task is working: a non-blocking send answers as soon
// as the job is stored, which may be before a worker took it.
func untilProgressed(t *testing.T, cl *a2aclient.Client, id a2a.TaskID) {
	t.Helper()
	for ev, err := range cl.ResubscribeToTask(bounded(t), &a2a.TaskIDParams{ID: id}) {
		if err != nil {
			t.Fatalf("tasks/resubscribe %s: %v", id, err)
		}
		if progressed(ev) {
			return
		}
	}
	t.Fatalf("tasks/resubscribe %s ended before the tool reported progress", id)
}
