package a2abridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/a2abridge"
	"github.com/toolbus/toolbus/worker/a2abridge/a2abridgetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRuntime returns a runtime on an embedded NATS server.
func newRuntime(t *testing.T) *worker.Runtime {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt, err := worker.New(nc, worker.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	return rt
}

// httpClient returns a client whose idle connections are closed when the
// test ends.
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newBridge returns a bridge to the agent at url on rt, started, and
// closed when the test ends.
func newBridge(t testing.TB, rt *worker.Runtime, url string, opts ...a2abridge.Option) *a2abridge.Bridge {
	t.Helper()
	opts = append([]a2abridge.Option{a2abridge.WithLogger(quiet), a2abridge.WithHTTPClient(httpClient(t)),
		a2abridge.WithBackoff(10*time.Millisecond, 200*time.Millisecond), a2abridge.WithPollInterval(10 * time.Millisecond)}, opts...)
	b, err := a2abridge.New(rt, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func invoke(rt *worker.Runtime, method, params string, timeout time.Duration, progress func(float64, string)) (json.RawMessage, *schema.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	call := schema.Call{Request: schema.Request{ID: json.RawMessage("1"), Method: method}}
	if params != "" {
		call.Params = json.RawMessage(params)
	}
	return rt.Invoke(ctx, call, progress)
}

// received waits for a task id on ch, failing the test after a bound.
func received(t *testing.T, ch <-chan a2a.TaskID, what string) a2a.TaskID {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		return ""
	}
}

func TestBridgeServesSkills(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		name := map[bool]string{true: "streaming", false: "polling"}[streaming]
		t.Run(name, func(t *testing.T) {
			agent := a2abridgetest.Start(t, a2abridgetest.WithStreaming(streaming))
			rt := newRuntime(t)
			newBridge(t, rt, agent.URL, a2abridge.WithPrefix("agent"))

			want := []string{"agent.echo", "agent.fail", "agent.steps", "agent.wait"}
			if got := rt.Methods(); !slices.Equal(got, want) {
				t.Fatalf("Methods() = %v, want %v", got, want)
			}
			var echo schema.Descriptor
			for _, d := range rt.Descriptors() {
				if d.Name == "agent.echo" {
					echo = d
				}
			}
			if !strings.HasPrefix(echo.Description, "answers the message's parts") || !strings.Contains(echo.Description, "hello") ||
				echo.Version != "1.2.3" || string(echo.Params) != string(a2abridge.ParamsSchema) {
				t.Errorf("descriptor of agent.echo = %+v, want the skill's description and examples, the card's version and the params schema", echo)
			}

			tests := []struct {
				name       string
				method     string
				params     string
				wantResult string
				wantErr    *schema.Error
			}{
				{"text answers a string", "agent.echo", `{"text":"hello"}`, `"hello"`, nil},
				{"data answers its object", "agent.echo", `{"data":{"n":12,"s":"x"}}`, `{"n":12,"s":"x"}`, nil},
				{"text and data answer the parts", "agent.echo", `{"text":"a","data":{"n":1}}`,
					`[{"kind":"text","text":"a"},{"kind":"data","data":{"n":1}}]`, nil},
				{"steps", "agent.steps", `{"text":"go"}`, `"done"`, nil},
				{"failed task", "agent.fail", `{"text":"pay"}`, ``, schema.ErrTool},
				{"positional params", "agent.echo", `["hello"]`, ``, schema.ErrInvalidParams},
				{"unknown member", "agent.echo", `{"txt":"hello"}`, ``, schema.ErrInvalidParams},
				{"no params", "agent.echo", ``, ``, schema.ErrInvalidParams},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					got, err := invoke(rt, tt.method, tt.params, 10*time.Second, nil)
					if tt.wantErr != nil {
						if !errors.Is(err, tt.wantErr) {
							t.Fatalf("%s(%s) = %s, %v; want code %d", tt.method, tt.params, got, err, tt.wantErr.Code)
						}
						return
					}
					if err != nil || string(got) != tt.wantResult {
						t.Fatalf("%s(%s) = %s, %v; want %s", tt.method, tt.params, got, err, tt.wantResult)
					}
				})
			}
		})
	}
}

func TestBridgeFailedTaskCarriesTheAgentsMessage(t *testing.T) {
	agent := a2abridgetest.Start(t)
	rt := newRuntime(t)
	newBridge(t, rt, agent.URL)
	_, err := invoke(rt, "fail", `{"text":"pay"}`, 10*time.Second, nil)
	if !errors.Is(err, schema.ErrTool) || !strings.Contains(err.Message, "insufficient funds") {
		t.Fatalf("fail = %v, want a tool error with the agent's message", err)
	}
	var data map[string]any
	if json.Unmarshal(err.Data, &data) != nil || data["state"] != "failed" || data["task_id"] == "" || data["message"] != "insufficient funds" {
		t.Errorf("fail's error data = %s, want the task's id, state and message", err.Data)
	}
}

func TestBridgeReportsProgress(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "streaming", false: "polling"}[streaming], func(t *testing.T) {
			agent := a2abridgetest.Start(t, a2abridgetest.WithStreaming(streaming))
			rt := newRuntime(t)
			newBridge(t, rt, agent.URL)
			var mu sync.Mutex
			var got []string
			res, err := invoke(rt, "steps", `{"text":"go"}`, 10*time.Second, func(_ float64, msg string) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, msg)
			})
			if err != nil || string(res) != `"done"` {
				t.Fatalf("steps = %s, %v; want done", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			// Polling sees the states the task is in when it looks, which
			// may skip steps; a stream sees them all.
			want := []string{"working: step 1", "working: step 2", "completed"}
			if !streaming {
				want = []string{"completed"}
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("progress = %q, want it to include %q", got, w)
				}
			}
		})
	}
}

func TestBridgeCancelsTheRemoteTaskAtTheDeadline(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "streaming", false: "polling"}[streaming], func(t *testing.T) {
			agent := a2abridgetest.Start(t, a2abridgetest.WithStreaming(streaming))
			rt := newRuntime(t)
			newBridge(t, rt, agent.URL)
			_, err := invoke(rt, "wait", `{"text":"forever"}`, 300*time.Millisecond, nil)
			if !errors.Is(err, schema.ErrTimeout) {
				t.Fatalf("wait = %v, want a timeout", err)
			}
			started := received(t, agent.Started, "the task started")
			if canceled := received(t, agent.Canceled, "the task was canceled"); canceled != started {
				t.Errorf("canceled task %s, want %s", canceled, started)
			}
		})
	}
}

func TestBridgeRecoversWhenTheAgentComesBack(t *testing.T) {
	agent := a2abridgetest.Start(t)
	rt := newRuntime(t)
	newBridge(t, rt, agent.URL)
	if got, err := invoke(rt, "echo", `{"text":"before"}`, 10*time.Second, nil); err != nil || string(got) != `"before"` {
		t.Fatalf("echo = %s, %v; want before", got, err)
	}

	agent.Stop()
	_, err := invoke(rt, "echo", `{"text":"gone"}`, 10*time.Second, nil)
	if !errors.Is(err, schema.ErrUnavailable) {
		t.Fatalf("echo with the agent gone = %v, want unavailable", err)
	}
	var data map[string]any
	if json.Unmarshal(err.Data, &data) != nil || data["retryable"] != true {
		t.Errorf("echo with the agent gone: data = %s, want retryable", err.Data)
	}
	// Until it is back, calls are answered at once, without reaching it.
	if _, err := invoke(rt, "echo", `{"text":"gone"}`, 10*time.Second, nil); !errors.Is(err, schema.ErrUnavailable) {
		t.Fatalf("echo again with the agent gone = %v, want unavailable", err)
	}

	agent.Restart(t)
	toolbustest.Eventually(t, func() bool {
		got, err := invoke(rt, "echo", `{"text":"after"}`, 10*time.Second, nil)
		if err != nil && !errors.Is(err, schema.ErrUnavailable) {
			t.Fatalf("echo while the bridge reconnects = %v, want unavailable", err)
		}
		return err == nil && string(got) == `"after"`
	}, "the bridge reaches the agent again")
}

func TestBridgeCredentials(t *testing.T) {
	agent := a2abridgetest.Start(t, a2abridgetest.WithToken("s3cret"))

	t.Run("a bearer token reads the extended card", func(t *testing.T) {
		rt := newRuntime(t)
		newBridge(t, rt, agent.URL, a2abridge.WithBearerToken("s3cret"))
		if !slices.Contains(rt.Methods(), "secret") {
			t.Fatalf("Methods() = %v, want the extended card's skill secret", rt.Methods())
		}
		if got, err := invoke(rt, "secret", `{"text":"x"}`, 10*time.Second, nil); err != nil || string(got) != `"secret"` {
			t.Fatalf("secret = %s, %v", got, err)
		}
	})
	t.Run("without credentials", func(t *testing.T) {
		rt := newRuntime(t)
		newBridge(t, rt, agent.URL)
		if slices.Contains(rt.Methods(), "secret") {
			t.Fatalf("Methods() = %v, want only the public card's skills", rt.Methods())
		}
		_, err := invoke(rt, "echo", `{"text":"x"}`, 10*time.Second, nil)
		if !errors.Is(err, schema.ErrUnavailable) || !strings.Contains(err.Message, "HTTP 401") {
			t.Fatalf("echo without the token = %v, want unavailable naming HTTP 401", err)
		}
	})
}

func TestBridgeWithdrawsSkills(t *testing.T) {
	agent := a2abridgetest.Start(t)
	rt := newRuntime(t)
	newBridge(t, rt, agent.URL, a2abridge.WithCardRefresh(20*time.Millisecond))
	if got, err := invoke(rt, "steps", `{"text":"go"}`, 10*time.Second, nil); err != nil || string(got) != `"done"` {
		t.Fatalf("steps = %s, %v; want done", got, err)
	}
	agent.Withdraw("steps")
	toolbustest.Eventually(t, func() bool {
		_, err := invoke(rt, "steps", `{"text":"go"}`, 10*time.Second, nil)
		return errors.Is(err, schema.ErrMethodNotFound)
	}, "a skill the card no longer lists is answered -32601")
	if got, err := invoke(rt, "echo", `{"text":"still"}`, 10*time.Second, nil); err != nil || string(got) != `"still"` {
		t.Fatalf("echo = %s, %v; want still", got, err)
	}
}

func TestNewChecksItsInput(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		name string
		url  string
		opts []a2abridge.Option
	}{
		{"not a URL", "::", nil},
		{"not http", "ftp://127.0.0.1/", nil},
		{"reserved prefix", "http://127.0.0.1/", []a2abridge.Option{a2abridge.WithPrefix("rpc")}},
		{"empty token", "http://127.0.0.1/", []a2abridge.Option{a2abridge.WithBearerToken(" ")}},
		{"empty API key", "http://127.0.0.1/", []a2abridge.Option{a2abridge.WithAPIKey("", "")}},
		{"bad backoff", "http://127.0.0.1/", []a2abridge.Option{a2abridge.WithBackoff(time.Second, time.Millisecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := a2abridge.New(rt, tt.url, tt.opts...); err == nil {
				t.Errorf("New(%q) = nil error, want one", tt.url)
			}
		})
	}
}

func TestResult(t *testing.T) {
	text := func(s string) a2a.Part { return a2a.TextPart{Text: s} }
	data := func(m map[string]any) a2a.Part { return a2a.DataPart{Data: m} }
	task := func(status *a2a.Message, arts ...*a2a.Artifact) *a2abridge.Outcome {
		return &a2abridge.Outcome{Task: &a2a.Task{Artifacts: arts, Status: a2a.TaskStatus{State: a2a.TaskStateCompleted, Message: status}}}
	}
	art := func(parts ...a2a.Part) *a2a.Artifact { return &a2a.Artifact{Parts: parts} }
	tests := []struct {
		name string
		out  *a2abridge.Outcome
		want string
	}{
		{"one data part", task(nil, art(data(map[string]any{"a": 1}))), `{"a":1}`},
		{"text over artifacts", task(nil, art(text("a")), art(text("b"))), `"a\nb"`},
		{"mixed parts", task(nil, art(text("a"), data(map[string]any{"b": 2}))), `[{"kind":"text","text":"a"},{"kind":"data","data":{"b":2}}]`},
		{"no artifacts: the status message", task(a2a.NewMessage(a2a.MessageRoleAgent, text("said"))), `"said"`},
		{"nothing", task(nil), `[]`},
		{"a message and no task", &a2abridge.Outcome{Message: a2a.NewMessage(a2a.MessageRoleAgent, text("hi"))}, `"hi"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a2abridge.Result(tt.out)
			if err != nil || string(got) != tt.want {
				t.Errorf("Result = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestBridgeThroughTheCluster(t *testing.T) {
	agent := a2abridgetest.Start(t)
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(),
		toolbustest.WithTools(func(rt *worker.Runtime) error {
			newBridge(t, rt, agent.URL, a2abridge.WithPrefix("agent"))
			return nil
		}))

	t.Run("a call over HTTP", func(t *testing.T) {
		r := c.Call(t, "agent.echo", `{"text":"over http"}`)
		if r.Error != nil || string(r.Result) != `"over http"` {
			t.Fatalf("agent.echo = %s, %v; want over http", r.Result, r.Error)
		}
	})
	t.Run("announced to discovery", func(t *testing.T) {
		toolbustest.Eventually(t, func() bool {
			r := c.Call(t, "rpc.discover", "")
			return r.Error == nil && strings.Contains(string(r.Result), `"agent.echo"`) &&
				strings.Contains(string(r.Result), "answers the message's parts")
		}, "rpc.discover lists agent.echo with its description")
		// Discovery now validates params against the announced schema.
		if r := c.Call(t, "agent.echo", `{"text":1}`); !errors.Is(r.Error, schema.ErrInvalidParams) {
			t.Fatalf("agent.echo with a number for text = %s, %v; want invalid params", r.Result, r.Error)
		}
	})
	t.Run("the deadline cancels the remote task", func(t *testing.T) {
		r := c.Call(t, "agent.wait", `{"text":"x"}`, "Toolbus-Timeout", "300ms")
		if !errors.Is(r.Error, schema.ErrTimeout) {
			t.Fatalf("agent.wait = %s, %v; want a timeout", r.Result, r.Error)
		}
		started := received(t, agent.Started, "the task started")
		if canceled := received(t, agent.Canceled, "the task was canceled"); canceled != started {
			t.Errorf("canceled task %s, want %s", canceled, started)
		}
	})
	t.Run("a job", func(t *testing.T) {
		var sub schema.JobSubmitResult
		submit(t, c, `{"method":"agent.steps","params":{"text":"go"}}`, &sub)
		toolbustest.Eventually(t, func() bool {
			var rec schema.JobRecord
			r := c.Call(t, schema.MethodJobsGet, `{"id":"`+sub.ID+`"}`)
			if r.Error != nil || json.Unmarshal(r.Result, &rec) != nil {
				t.Fatalf("rpc.jobs.get = %s, %v", r.Result, r.Error)
			}
			if rec.State.Final() && (rec.State != schema.JobSucceeded || string(rec.Result) != `"done"`) {
				t.Fatalf("job = %s, want succeeded with done", r.Result)
			}
			return rec.State.Final()
		}, "the job succeeds")
	})
	t.Run("canceling a job cancels the remote task", func(t *testing.T) {
		var sub schema.JobSubmitResult
		submit(t, c, `{"method":"agent.wait","params":{"text":"x"}}`, &sub)
		started := received(t, agent.Started, "the task started")
		if r := c.Call(t, schema.MethodJobsCancel, `{"id":"`+sub.ID+`"}`); r.Error != nil {
			t.Fatalf("rpc.jobs.cancel = %v", r.Error)
		}
		if canceled := received(t, agent.Canceled, "the task was canceled"); canceled != started {
			t.Errorf("canceled task %s, want %s", canceled, started)
		}
	})
}

func submit(t *testing.T, c *toolbustest.Cluster, params string, sub *schema.JobSubmitResult) {
	t.Helper()
	r := c.Call(t, schema.MethodJobsSubmit, params)
	if r.Error != nil || json.Unmarshal(r.Result, sub) != nil {
		t.Fatalf("rpc.jobs.submit %s = %s, %v", params, r.Result, r.Error)
	}
}

func TestBridgeReadsTheCardAtItsOwnURL(t *testing.T) {
	agent := a2abridgetest.Start(t)
	rt := newRuntime(t)
	newBridge(t, rt, agent.URL+"/.well-known/agent-card.json")
	if got, err := invoke(rt, "echo", `{"text":"card url"}`, 10*time.Second, nil); err != nil || string(got) != `"card url"` {
		t.Fatalf("echo = %s, %v; want card url", got, err)
	}
}

func TestStartFailsWithoutAnAgent(t *testing.T) {
	agent := a2abridgetest.Start(t)
	agent.Stop()
	rt := newRuntime(t)
	b, err := a2abridge.New(rt, agent.URL, a2abridge.WithLogger(quiet), a2abridge.WithHTTPClient(httpClient(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err == nil || !strings.Contains(err.Error(), "cannot read the agent card") {
		t.Fatalf("Start with no agent = %v, want an error about reading its card", err)
	}
	b.Close()
}
