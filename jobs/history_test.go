package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// stepper is a tool that reports the progress texts the test hands it,
// one at a time, and then fails.
type stepper struct{ texts chan string }

func (s stepper) register(rt *worker.Runtime) error {
	return rt.HandleFunc("steps", func(ctx context.Context, req *worker.Request) (any, error) {
		for i := 1; ; i++ {
			select {
			case text, ok := <-s.texts:
				if !ok {
					return nil, schema.NewError(2001, "out of steps", nil)
				}
				worker.Progress(ctx, float64(i), text)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
}

// say hands text to the tool and waits until the record shows it.
func (s stepper) say(t *testing.T, svc *jobs.Service, id, text string) {
	t.Helper()
	s.texts <- text
	waitFor(t, svc, id, "progress "+text, func(r *schema.JobRecord) bool { return r.Progress != nil && r.Progress.Message == text })
}

func submitJSON(t *testing.T, s *jobs.Service, params string) string {
	t.Helper()
	res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, params)
	if rpcErr != nil {
		t.Fatalf("submit %s: %v", params, rpcErr)
	}
	var sub schema.JobSubmitResult
	if err := json.Unmarshal(res, &sub); err != nil {
		t.Fatal(err)
	}
	return sub.ID
}

// TestHistory checks that a job keeps its conversation with its record:
// the submitter's message as it was sent, each new text of its progress
// (a repeated text is not a new message), and its failure, each with an
// id that names it the same on every read, and its references; another
// service reads them all.
func TestHistory(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	st := stepper{texts: make(chan string)}
	startRunner(t, js, newRuntime(t, nc, st.register), jobs.WithProgressInterval(10*time.Millisecond))

	id := submitJSON(t, s, `{"method":"steps","context_id":"c1","references":["earlier-1","earlier-2"],`+
		`"message":{"id":"m1","text":"go","content":{"kind":"message","n":12345678901234567890}}}`)
	st.say(t, s, id, "starting")
	st.say(t, s, id, "starting") // no new text
	st.say(t, s, id, "half way")
	close(st.texts)
	waitState(t, s, id, schema.JobFailed)

	r, rpcErr := get(t, newService(t, js), id)
	if rpcErr != nil {
		t.Fatalf("get on another service: %v", rpcErr)
	}
	type said struct{ id, role, text, data string }
	var got []said
	for _, m := range r.History {
		got = append(got, said{m.ID, string(m.Role), m.Text, string(m.Data)})
	}
	want := []said{
		{"m1", "user", "go", ""},
		{id + "-2", "agent", "starting", `{"percent":1}`},
		{id + "-3", "agent", "half way", `{"percent":3}`},
		{id + "-4", "agent", "out of steps", `{"error":{"code":2001,"message":"out of steps"}}`},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history = %v, want %v", got, want)
	}
	if len(r.History) > 0 && string(r.History[0].Content) != `{"kind":"message","n":12345678901234567890}` {
		t.Errorf("the submitter's message content = %s, want it byte for byte", r.History[0].Content)
	}
	if strings.Join(r.References, ",") != "earlier-1,earlier-2" || r.HistoryDropped != 0 || r.ContextID != "c1" {
		t.Errorf("record = references %q, history_dropped %d, context %q; want both references, none dropped, c1", r.References, r.HistoryDropped, r.ContextID)
	}
	again, _ := get(t, s, id)
	if fmt.Sprint(again.History) != fmt.Sprint(r.History) {
		t.Errorf("a second read of the history = %v, want the first %v", again.History, r.History)
	}
}

// TestHistoryBudget checks that a history stays within
// jobs.MaxHistoryBytes: the oldest messages, the submitter's first, give
// their room, are counted in history_dropped, and the ids of the messages
// left do not change.
func TestHistoryBudget(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	st := stepper{texts: make(chan string)}
	startRunner(t, js, newRuntime(t, nc, st.register), jobs.WithProgressInterval(10*time.Millisecond))

	big := strings.Repeat("u", jobs.MaxHistoryBytes/2)
	id := submitJSON(t, s, `{"method":"steps","message":{"id":"m1","text":"`+big+`"}}`)
	// Progress texts are at most 1 KiB (schema.MaxProgressMessageBytes).
	const steps, size = 40, 1000
	for i := range steps {
		st.say(t, s, id, fmt.Sprintf("%02d%s", i, strings.Repeat("a", size)))
	}
	r, _ := get(t, s, id)
	b, _ := json.Marshal(r.History)
	if len(b) > jobs.MaxHistoryBytes {
		t.Errorf("history of %d bytes, want at most %d", len(b), jobs.MaxHistoryBytes)
	}
	if r.HistoryDropped == 0 || len(r.History) == 0 || r.History[0].Role != schema.JobRoleAgent {
		t.Fatalf("history_dropped %d, %d messages, first of %q; want the submitter's message dropped first", r.HistoryDropped, len(r.History), r.History[0].Role)
	}
	for i, m := range r.History {
		if want := fmt.Sprintf("%s-%d", id, r.HistoryDropped+i+1); m.ID != want {
			t.Errorf("message %d id = %s, want %s", i, m.ID, want)
		}
	}
	if last := r.History[len(r.History)-1]; !strings.HasPrefix(last.Text, fmt.Sprintf("%02d", steps-1)) {
		t.Errorf("last message = %.20q, want the last step's", last.Text)
	}
	if r.HistoryDropped+len(r.History) != steps+1 {
		t.Errorf("history_dropped %d + %d kept, want %d messages in all", r.HistoryDropped, len(r.History), steps+1)
	}
	close(st.texts)
	waitState(t, s, id, schema.JobFailed)

	// A message over the budget alone is dropped at once.
	id = submitJSON(t, s, `{"method":"echo","message":{"id":"huge","text":"`+strings.Repeat("h", jobs.MaxHistoryBytes)+`"}}`)
	if r, _ := get(t, s, id); len(r.History) != 0 || r.HistoryDropped != 1 {
		t.Errorf("a message over the budget: history %d messages, %d dropped; want none kept, 1 dropped", len(r.History), r.HistoryDropped)
	}
}

// TestIdempotencyKeyWithContext checks that a resubmit with the same
// context_id and references names the same job.
func TestIdempotencyKeyWithContext(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	const p = `{"method":"echo","params":{},"idempotency_key":"k","context_id":"c","references":["r1"],"message":{"id":"%s"}}`
	first := submitJSON(t, s, fmt.Sprintf(p, "m1"))
	if again := submitJSON(t, s, fmt.Sprintf(p, "m2")); again != first {
		t.Errorf("the same submit again = job %s, want %s", again, first)
	}
}
