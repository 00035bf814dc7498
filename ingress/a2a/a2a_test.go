package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"go.uber.org/goleak"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitBound bounds every call of a test; it is a bound on a hang, not a
// timing goal.
const waitBound = 30 * time.Second

// gate holds the calls of the tool "slow" until the test opens it.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate                  { return &gate{ch: make(chan struct{})} }
func (g *gate) open()                 { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() <-chan struct{} { return g.ch }

// tools serves echo (its params back), fail (code 2001), secret, and slow,
// which reports 50% "halfway" and then waits for g (or its end).
func tools(g *gate) func(rt *worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		echo := func(ctx context.Context, req *worker.Request) (any, error) { return req.Params, nil }
		if err := rt.HandleFunc("echo", echo, worker.Describe(schema.Descriptor{Description: "Answers its params."})); err != nil {
			return err
		}
		if err := rt.HandleFunc("secret", echo); err != nil {
			return err
		}
		if err := rt.HandleFunc("fail", func(ctx context.Context, req *worker.Request) (any, error) {
			return nil, schema.NewError(2001, "insufficient funds", map[string]any{"balance": 3})
		}); err != nil {
			return err
		}
		return rt.HandleFunc("slow", func(ctx context.Context, req *worker.Request) (any, error) {
			worker.Progress(ctx, 50, "halfway")
			select {
			case <-g.wait():
				return map[string]any{"done": true}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}
}

// keyTransport adds an API key to every request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if k.key != "" {
		r.Header.Set(auth.APIKeyHeader, k.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// secured starts a cluster with jobs, discovery, authentication and the
// A2A front door, with push notifications to loopback receivers and echo
// as its one public skill: alice may use echo, slow and fail, bob echo;
// neither may call secret.
func secured(t *testing.T, g *gate) *toolbustest.Cluster {
	t.Helper()
	jobsRPC := []string{"rpc.jobs.*"}
	c := toolbustest.Start(t, toolbustest.WithTools(tools(g)), toolbustest.WithJobs(), toolbustest.WithDiscovery(),
		toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Jobs.CallbackAllow, c.A2A.PublicSkills = []string{"127.0.0.1"}, []string{"echo"}
		}),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: append(jobsRPC, "echo", "slow", "fail")},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: append(jobsRPC, "echo")},
		}}))
	t.Cleanup(g.open)
	waitForTools(t, c, "echo", "slow", "fail", "secret")
	return c
}

func waitForTools(t *testing.T, c *toolbustest.Cluster, names ...string) {
	t.Helper()
	toolbustest.Eventually(t, func() bool {
		for _, n := range names {
			if _, ok := c.Registry.Lookup(n); !ok {
				return false
			}
		}
		return true
	}, "the registry knows the tools")
}

// client returns an SDK client of the front door at base with an API key
// (none when key is empty).
func client(t *testing.T, base, key string) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Transport: keyTransport{key}}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	cl, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: base + toolbusa2a.Path, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatalf("a2aclient for %s: %v", base, err)
	}
	t.Cleanup(func() { cl.Destroy() })
	return cl
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// call returns a message that calls method with params in a data part.
func call(method string, params map[string]any) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"method": method, "params": params}})
}

func send(m *a2a.Message, blocking bool) *a2a.MessageSendParams {
	return &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &blocking}}
}

// sendTask sends p and returns the task it answers.
func sendTask(t *testing.T, cl *a2aclient.Client, p *a2a.MessageSendParams) *a2a.Task {
	t.Helper()
	res, err := cl.SendMessage(bounded(t), p)
	if err != nil {
		t.Fatalf("message/send: %v", err)
	}
	tk, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("message/send = %T, want a task", res)
	}
	return tk
}

// result returns the data of the result artifact of a completed task.
func result(t *testing.T, tk *a2a.Task) map[string]any {
	t.Helper()
	if tk.Status.State != a2a.TaskStateCompleted || len(tk.Artifacts) != 1 || len(tk.Artifacts[0].Parts) != 1 {
		t.Fatalf("task = %+v, want completed with one artifact of one part", tk)
	}
	p, ok := tk.Artifacts[0].Parts[0].(a2a.DataPart)
	if !ok {
		t.Fatalf("artifact part = %T, want a data part", tk.Artifacts[0].Parts[0])
	}
	return p.Data
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSendAndGet checks message/send, non-blocking then polled with
// tasks/get, and blocking, with the skill named in a data part or in the
// metadata; the task is the job, keeps its context and carries the result
// as an artifact's data part, or the tool's error when it failed.
func TestSendAndGet(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	alice := client(t, c.BaseURL, "alice-key")

	// A non-blocking send answers before the task ends: slow holds it
	// until the gate opens.
	held := sendTask(t, alice, send(call("slow", nil), false))
	if held.Status.State.Terminal() {
		t.Errorf("non-blocking send of slow = %s, want a task not final yet", jsonOf(held))
	}
	g.open()

	m := call("echo", map[string]any{"n": json.Number("12345678901234567890")})
	m.ContextID = "conversation-1"
	tk := sendTask(t, alice, send(m, false))
	if tk.ContextID != "conversation-1" {
		t.Errorf("non-blocking send = %s, want a task of context conversation-1", jsonOf(tk))
	}
	var got *a2a.Task
	toolbustest.Eventually(t, func() bool {
		var err error
		got, err = alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID})
		return err == nil && got.Status.State.Terminal()
	}, "the task ends")
	if data := result(t, got); data["n"] == nil || got.ContextID != "conversation-1" {
		t.Errorf("tasks/get = %s, want the params back in context conversation-1", jsonOf(got))
	}
	// The SDK's client reads numbers as float64; on the wire every digit
	// is kept.
	status, body := c.PostURL(t, c.BaseURL+toolbusa2a.Path, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"`+string(tk.ID)+`"}}`,
		auth.APIKeyHeader, "alice-key")
	if status != http.StatusOK || !strings.Contains(string(body), `{"n":12345678901234567890}`) {
		t.Errorf("tasks/get over HTTP = %d %s, want the result with every digit", status, body)
	}
	job := c.Call(t, schema.MethodJobsGet, `{"id":"`+string(tk.ID)+`"}`, auth.APIKeyHeader, "alice-key")
	var rec schema.JobRecord
	if job.Error != nil || json.Unmarshal(job.Result, &rec) != nil || rec.ContextID != "conversation-1" || rec.Method != "echo" {
		t.Errorf("rpc.jobs.get of the task = %s %v, want the echo job of context conversation-1", job.Result, job.Error)
	}

	bySkill := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"y": 2}})
	bySkill.Metadata = map[string]any{toolbusa2a.SkillKey: "echo"}
	tk = sendTask(t, alice, send(bySkill, true))
	if data := result(t, tk); jsonOf(data) != `{"y":2}` || tk.ContextID == "" {
		t.Errorf("blocking send by skill = %s, want completed with {\"y\":2} and a context", jsonOf(tk))
	}

	tk = sendTask(t, alice, send(call("fail", nil), true))
	if tk.Status.State != a2a.TaskStateFailed || tk.Status.Message == nil || !strings.Contains(jsonOf(tk.Status.Message), `"code":2001`) {
		t.Errorf("blocking send of fail = %s, want failed with the tool's error 2001", jsonOf(tk))
	}
}

// events reads a stream until it ends, calling seen with each event, and
// returns them.
func events(t *testing.T, seq func(func(a2a.Event, error) bool), seen func(a2a.Event)) []a2a.Event {
	t.Helper()
	var out []a2a.Event
	for ev, err := range seq {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		out = append(out, ev)
		seen(ev)
	}
	return out
}

// kinds sums up a stream: the task's state, each status update's state
// (with "halfway" for the progress), "artifact" for an artifact.
func kinds(evs []a2a.Event) []string {
	var out []string
	for _, ev := range evs {
		switch ev := ev.(type) {
		case *a2a.Task:
			out = append(out, "task")
		case *a2a.TaskStatusUpdateEvent:
			s := string(ev.Status.State)
			if ev.Status.Message != nil && strings.Contains(jsonOf(ev.Status.Message), "halfway") {
				s += " halfway"
			}
			if ev.Final {
				s += " final"
			}
			out = append(out, s)
		case *a2a.TaskArtifactUpdateEvent:
			out = append(out, "artifact")
		}
	}
	return out
}

// progressed reports whether ev says the slow tool is halfway.
func progressed(ev a2a.Event) bool {
	switch ev := ev.(type) {
	case *a2a.TaskStatusUpdateEvent:
		return ev.Status.Message != nil && strings.Contains(jsonOf(ev.Status.Message), "halfway")
	case *a2a.Task:
		return ev.Status.Message != nil && strings.Contains(jsonOf(ev.Status.Message), "halfway")
	}
	return false
}

// TestStream checks message/stream: the task, its progress as a status
// update, then the artifact of its result and the final status.
func TestStream(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	alice := client(t, c.BaseURL, "alice-key")
	evs := events(t, alice.SendStreamingMessage(bounded(t), send(call("slow", nil), true)), func(ev a2a.Event) {
		if progressed(ev) {
			g.open()
		}
	})
	got := kinds(evs)
	// The progress comes as a status update, or already in the first
	// event, the task, when the record had it before the stream began.
	halfway := slices.Contains(got, "working halfway") || (len(evs) > 0 && progressed(evs[0]))
	if len(got) < 3 || got[0] != "task" || !halfway ||
		!slices.Equal(got[len(got)-2:], []string{"artifact", "completed final"}) {
		t.Errorf("message/stream events = %q, want the task, working halfway, the artifact and completed final", got)
	}
}

// TestResubscribeOnAnotherIngress checks that tasks/resubscribe on a
// second ingress of the cluster follows a task sent to the first to its
// end.
func TestResubscribeOnAnotherIngress(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	other := c.AddIngress(t)
	tk := sendTask(t, client(t, c.BaseURL, "alice-key"), send(call("slow", nil), false))
	evs := events(t, client(t, other.BaseURL, "alice-key").ResubscribeToTask(bounded(t), &a2a.TaskIDParams{ID: tk.ID}), func(ev a2a.Event) {
		if progressed(ev) {
			g.open()
		}
	})
	got := kinds(evs)
	if len(got) < 2 || got[0] != "task" || !slices.Equal(got[len(got)-2:], []string{"artifact", "completed final"}) {
		t.Errorf("tasks/resubscribe on another ingress = %q, want the task, then the artifact and completed final", got)
	}
	if _, ok := evs[len(evs)-2].(*a2a.TaskArtifactUpdateEvent); !ok || evs[len(evs)-2].(*a2a.TaskArtifactUpdateEvent).TaskID != tk.ID {
		t.Errorf("artifact event = %s, want one of task %s", jsonOf(evs[len(evs)-2]), tk.ID)
	}
}

// TestCancel checks tasks/cancel of a running task, and that a completed
// task cannot be canceled.
func TestCancel(t *testing.T) {
	c := secured(t, newGate())
	alice := client(t, c.BaseURL, "alice-key")
	tk := sendTask(t, alice, send(call("slow", nil), false))
	got, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: tk.ID})
	if err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("tasks/cancel = %s, %v; want canceled", jsonOf(got), err)
	}
	done := sendTask(t, alice, send(call("echo", nil), true))
	if _, err := alice.CancelTask(bounded(t), &a2a.TaskIDParams{ID: done.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Errorf("tasks/cancel of a completed task = %v, want %v", err, a2a.ErrTaskNotCancelable)
	}
}

// TestRefusals checks the A2A errors of what the front door refuses.
func TestRefusals(t *testing.T) {
	c := secured(t, newGate())
	alice := client(t, c.BaseURL, "alice-key")
	bob := client(t, c.BaseURL, "bob-key")
	text := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "hello"})
	file := a2a.NewMessage(a2a.MessageRoleUser, a2a.FilePart{File: a2a.FileURI{URI: "https://example.com/a.txt"}})
	badMethod := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"method": 5}})
	noMethod := a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"x": 1}})
	follow := call("echo", nil)
	follow.TaskID = "00000000000000000000000000"
	for _, tc := range []struct {
		name string
		m    *a2a.Message
		want error
	}{
		{"unknown skill", call("nothing", nil), a2a.ErrInvalidParams},
		{"skill the caller may not call", call("secret", nil), a2a.ErrInvalidParams},
		{"reserved method", call("rpc.jobs.list", nil), a2a.ErrInvalidParams},
		{"file part", file, a2a.ErrUnsupportedContentType},
		{"method not a string", badMethod, a2a.ErrInvalidParams},
		{"data part without method", noMethod, a2a.ErrInvalidParams},
		{"text alone without a text method", text, a2a.ErrUnsupportedContentType},
		{"message to a task that does not exist", follow, a2a.ErrTaskNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := alice.SendMessage(bounded(t), send(tc.m, true)); !errors.Is(err, tc.want) {
				t.Errorf("message/send = %v, want %v", err, tc.want)
			}
		})
	}

	// A refusal's data.error is toolbus's sentence alone: plain text, not
	// ending in the code's own message again.
	t.Run("words of a refusal", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"hi"}]}}}`
		status, raw := c.PostURL(t, c.BaseURL+toolbusa2a.Path, body, auth.APIKeyHeader, "alice-key")
		var resp struct {
			Error struct {
				Message string `json:"message"`
				Data    struct {
					Error string `json:"error"`
				} `json:"data"`
			} `json:"error"`
		}
		if status != http.StatusOK || json.Unmarshal(raw, &resp) != nil || resp.Error.Data.Error == "" {
			t.Fatalf("text message without a text method = %d %s, want an error with data.error", status, raw)
		}
		if strings.HasSuffix(resp.Error.Data.Error, resp.Error.Message) {
			t.Errorf("data.error %q repeats the message %q at its end", resp.Error.Data.Error, resp.Error.Message)
		}
		if strings.Contains(string(raw), `\u003c`) || strings.Contains(string(raw), `\u003e`) {
			t.Errorf("refusal %s has escaped angle brackets, want words that need no escape", raw)
		}
	})

	tk := sendTask(t, alice, send(call("slow", nil), false))
	t.Run("task of another caller", func(t *testing.T) {
		if _, err := bob.GetTask(bounded(t), &a2a.TaskQueryParams{ID: tk.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's tasks/get of alice's task = %v, want %v", err, a2a.ErrTaskNotFound)
		}
		if _, err := bob.CancelTask(bounded(t), &a2a.TaskIDParams{ID: tk.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's tasks/cancel of alice's task = %v, want %v", err, a2a.ErrTaskNotFound)
		}
		if _, err := bob.ListTaskPushConfig(bounded(t), &a2a.ListTaskPushConfigParams{TaskID: tk.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's push config list of alice's task = %v, want %v", err, a2a.ErrTaskNotFound)
		}
		for _, err := range bob.ResubscribeToTask(bounded(t), &a2a.TaskIDParams{ID: tk.ID}) {
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Errorf("bob's tasks/resubscribe of alice's task = %v, want %v", err, a2a.ErrTaskNotFound)
			}
			break
		}
		if _, err := alice.GetTask(bounded(t), &a2a.TaskQueryParams{ID: "not-a-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("tasks/get of a malformed id = %v, want %v", err, a2a.ErrTaskNotFound)
		}
	})

	t.Run("auth refused", func(t *testing.T) {
		for _, key := range []string{"", "wrong-key"} {
			if _, err := client(t, c.BaseURL, key).SendMessage(bounded(t), send(call("echo", nil), true)); err == nil {
				t.Errorf("message/send with key %q succeeded, want it refused", key)
			}
			req, _ := http.NewRequest(http.MethodPost, c.BaseURL+toolbusa2a.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`))
			req.Header.Set("Content-Type", "application/json")
			if key != "" {
				req.Header.Set(auth.APIKeyHeader, key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST /a2a with key %q = HTTP %d, want 401", key, resp.StatusCode)
			}
		}
	})
}

// receiver is a push notification receiver on loopback.
type receiver struct {
	url   string
	tasks chan pushed
}

type pushed struct {
	token, auth string
	task        a2a.Task
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{tasks: make(chan pushed, 64)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var tk a2a.Task
		if err := json.Unmarshal(b, &tk); err != nil {
			http.Error(w, "not a task", http.StatusBadRequest)
			return
		}
		select {
		case r.tasks <- pushed{token: req.Header.Get("X-A2A-Notification-Token"), auth: req.Header.Get("Authorization"), task: tk}:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/hook"
	return r
}

// until returns the first notification that ok accepts.
func (r *receiver) until(t *testing.T, what string, ok func(pushed) bool) pushed {
	t.Helper()
	timer := time.NewTimer(waitBound)
	defer timer.Stop()
	for {
		select {
		case p := <-r.tasks:
			if ok(p) {
				return p
			}
		case <-timer.C:
			t.Fatalf("gave up waiting for a push notification: %s", what)
		}
	}
}

// TestPushNotifications checks that a task's state changes are POSTed to
// a loopback receiver the operator allows, with the config's token and
// credentials, and the set, get, list and delete of several configs.
func TestPushNotifications(t *testing.T) {
	g := newGate()
	c := secured(t, g)
	alice := client(t, c.BaseURL, "alice-key")
	rcv := newReceiver(t)

	p := send(call("slow", nil), false)
	p.Config.PushConfig = &a2a.PushConfig{URL: rcv.url, Token: "token-at-submit"}
	tk := sendTask(t, alice, p)
	rcv.until(t, "the task is working", func(p pushed) bool {
		return p.task.ID == tk.ID && p.task.Status.State == a2a.TaskStateWorking
	})

	later, err := alice.SetTaskPushConfig(bounded(t), &a2a.TaskPushConfig{TaskID: tk.ID,
		Config: a2a.PushConfig{ID: "second", URL: rcv.url, Token: "token-set-later", Auth: &a2a.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "cred"}}})
	if err != nil || later.Config.ID != "second" {
		t.Fatalf("push config set = %s, %v", jsonOf(later), err)
	}
	list, err := alice.ListTaskPushConfig(bounded(t), &a2a.ListTaskPushConfigParams{TaskID: tk.ID})
	if err != nil || len(list) != 2 {
		t.Fatalf("push config list = %s, %v; want two configs", jsonOf(list), err)
	}
	first, err := alice.GetTaskPushConfig(bounded(t), &a2a.GetTaskPushConfigParams{TaskID: tk.ID})
	if err != nil || first.Config.Token != "token-at-submit" {
		t.Errorf("push config get of the default id = %s, %v; want the config given at submit", jsonOf(first), err)
	}

	g.open()
	seen := map[string]string{}
	for len(seen) < 2 {
		p := rcv.until(t, "the task is completed", func(p pushed) bool {
			return p.task.ID == tk.ID && p.task.Status.State == a2a.TaskStateCompleted
		})
		seen[p.token] = p.auth
		if len(p.task.Artifacts) != 1 {
			t.Errorf("pushed task = %s, want its result artifact", jsonOf(p.task))
		}
	}
	if a, ok := seen["token-at-submit"]; !ok || a != "" {
		t.Errorf("completed pushes = %q, want one with the token given at submit and no Authorization", seen)
	}
	if a, ok := seen["token-set-later"]; !ok || a != "Bearer cred" {
		t.Errorf("completed pushes = %q, want one with the later token and Authorization Bearer cred", seen)
	}

	if err := alice.DeleteTaskPushConfig(bounded(t), &a2a.DeleteTaskPushConfigParams{TaskID: tk.ID, ConfigID: "second"}); err != nil {
		t.Errorf("push config delete: %v", err)
	}
	if list, err := alice.ListTaskPushConfig(bounded(t), &a2a.ListTaskPushConfigParams{TaskID: tk.ID}); err != nil || len(list) != 1 {
		t.Errorf("push config list after delete = %s, %v; want one config", jsonOf(list), err)
	}
	_, err = alice.SetTaskPushConfig(bounded(t), &a2a.TaskPushConfig{TaskID: tk.ID, Config: a2a.PushConfig{URL: "http://10.0.0.1/hook"}})
	if !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("push config set to a private address = %v, want %v", err, a2a.ErrInvalidParams)
	}
}

// TestAgentCard checks the public card, fetched without credentials: the
// public skills and the security schemes of the ingress; and the
// authenticated extended card, which lists what its caller may call.
func TestAgentCard(t *testing.T) {
	c := secured(t, newGate())
	card, err := agentcard.NewResolver(nil).Resolve(bounded(t), c.BaseURL)
	if err != nil {
		t.Fatalf("resolve the public card: %v", err)
	}
	if got := skills(card); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("public card skills = %q, want the public skill echo", got)
	}
	if card.URL != c.BaseURL+toolbusa2a.Path || !card.SupportsAuthenticatedExtendedCard || !card.Capabilities.Streaming || !card.Capabilities.PushNotifications {
		t.Errorf("public card = %s, want the endpoint, an extended card, streaming and push", jsonOf(card))
	}
	if _, ok := card.SecuritySchemes[toolbusa2a.SchemeAPIKey].(a2a.APIKeySecurityScheme); !ok {
		t.Errorf("public card security schemes = %s, want an API key in a header", jsonOf(card.SecuritySchemes))
	}
	cl, err := a2aclient.NewFromCard(bounded(t), card, a2aclient.WithJSONRPCTransport(&http.Client{Transport: keyTransport{"bob-key"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Destroy() })
	ext, err := cl.GetAgentCard(bounded(t))
	if err != nil {
		t.Fatalf("extended card: %v", err)
	}
	if got := skills(ext); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("bob's extended card skills = %q, want echo", got)
	}
	ext, err = client(t, c.BaseURL, "alice-key").GetAgentCard(bounded(t))
	if got := skills(ext); err != nil || !slices.Equal(got, []string{"echo", "fail", "slow"}) {
		t.Errorf("alice's extended card skills = %q, %v; want echo, fail and slow", got, err)
	}
}

func skills(card *a2a.AgentCard) []string {
	if card == nil {
		return nil
	}
	var out []string
	for _, s := range card.Skills {
		out = append(out, s.ID)
	}
	slices.Sort(out)
	return out
}

// TestOpenFrontDoor checks the front door without authentication: the
// public card lists every skill, and text alone goes to the operator's
// text method.
func TestOpenFrontDoor(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithTools(tools(newGate())), toolbustest.WithJobs(), toolbustest.WithDiscovery(),
		toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) { c.A2A.TextMethod = "echo" }))
	waitForTools(t, c, "echo", "slow", "fail", "secret")
	card, err := agentcard.NewResolver(nil).Resolve(bounded(t), c.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if got := skills(card); !slices.Equal(got, []string{"echo", "fail", "secret", "slow"}) || card.SecuritySchemes != nil {
		t.Errorf("open card = %s, want every skill and no security scheme", jsonOf(card))
	}
	tk := sendTask(t, client(t, c.BaseURL, ""), send(a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "hello"}), true))
	if data := result(t, tk); jsonOf(data) != `{"text":"hello"}` {
		t.Errorf("text message = %s, want echo of {\"text\":\"hello\"}", jsonOf(tk))
	}
}
