package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// local runs jobs in the process with a worker runtime's Invoke, so that
// the runner's own rules are tested without a bus in between; a runner in
// an ingress uses a jobs.BusInvoker (see invoke_test.go and toolbustest).
type local struct{ *worker.Runtime }

var _ jobs.Invoker = local{}

func (l local) Invoke(ctx context.Context, call schema.Call, progress func(float64, string)) (json.RawMessage, error) {
	res, rpcErr := l.Runtime.Invoke(ctx, call, progress)
	if rpcErr != nil {
		return nil, rpcErr
	}
	return res, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer starts an embedded server on dir (a fresh one when empty)
// and stops it when the test ends.
func startServer(t *testing.T, dir string) *bus.Embedded {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// connect opens an in-process connection and its JetStream handle.
func connect(t *testing.T, e *bus.Embedded) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := e.Connect(bus.WithLogger(quiet))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	return nc, js
}

func newService(t *testing.T, js jetstream.JetStream, opts ...jobs.Option) *jobs.Service {
	t.Helper()
	s, err := jobs.New(js, append([]jobs.Option{jobs.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("jobs.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Service.Shutdown: %v", err)
		}
	})
	return s
}

// newRuntime returns a worker runtime on nc holding tools, as an invoker;
// it is never started on the bus, as only the runner calls it.
func newRuntime(t *testing.T, nc *nats.Conn, register func(rt *worker.Runtime) error) local {
	t.Helper()
	rt, err := worker.New(nc, worker.WithLogger(quiet))
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	if err := register(rt); err != nil {
		t.Fatalf("register tools: %v", err)
	}
	return local{rt}
}

// startRunner starts a runner of inv on js and shuts it down when the test
// ends (tests may shut it down earlier; a second Shutdown is harmless).
func startRunner(t *testing.T, js jetstream.JetStream, inv jobs.Invoker, opts ...jobs.RunnerOption) *jobs.Runner {
	t.Helper()
	base := []jobs.RunnerOption{jobs.WithRunnerLogger(quiet), jobs.WithProgressInterval(20 * time.Millisecond), jobs.WithFetchWait(time.Second)}
	r, err := jobs.NewRunner(js, inv, append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Runner.Start: %v", err)
	}
	t.Cleanup(func() { shutdownRunner(t, r) })
	return r
}

func shutdownRunner(t *testing.T, r *jobs.Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Errorf("Runner.Shutdown: %v", err)
	}
}

// rpc calls an rpc.jobs.* method as caller.
func rpc(t *testing.T, s *jobs.Service, caller, method, params string) (json.RawMessage, *schema.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: method}, Caller: caller}
	if params != "" {
		call.Params = json.RawMessage(params)
	}
	return s.ServeRPC(ctx, call)
}

// submit submits a job of method with params and returns its id.
func submit(t *testing.T, s *jobs.Service, method, params string) string {
	t.Helper()
	p, _ := json.Marshal(map[string]any{"method": method, "params": json.RawMessage(params)})
	res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, string(p))
	if rpcErr != nil {
		t.Fatalf("submit %s: %d %s %s", method, rpcErr.Code, rpcErr.Message, rpcErr.Data)
	}
	var r schema.JobSubmitResult
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("submit result %s: %v", res, err)
	}
	return r.ID
}

// get reads a job's record as the anonymous caller.
func get(t *testing.T, s *jobs.Service, id string) (*schema.JobRecord, *schema.Error) {
	t.Helper()
	res, rpcErr := rpc(t, s, "", schema.MethodJobsGet, fmt.Sprintf(`{"id":%q}`, id))
	if rpcErr != nil {
		return nil, rpcErr
	}
	var r schema.JobRecord
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("get result %s: %v", res, err)
	}
	return &r, nil
}

// waitFor polls job id until ok holds for its record.
func waitFor(t *testing.T, s *jobs.Service, id string, what string, ok func(*schema.JobRecord) bool) *schema.JobRecord {
	t.Helper()
	var r *schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		var rpcErr *schema.Error
		r, rpcErr = get(t, s, id)
		if rpcErr != nil {
			t.Fatalf("get %s: %d %s", id, rpcErr.Code, rpcErr.Message)
		}
		return ok(r)
	}, "job "+id+": "+what)
	return r
}

// queuedMessages counts the job messages of the default prefix that the
// work-queue stream holds: queued or running jobs not yet acknowledged.
func queuedMessages(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx := t.Context()
	st, err := js.Stream(ctx, "TOOLBUS_JOBS")
	if err != nil {
		t.Fatalf("jobs stream: %v", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("toolbus.jobs.>"))
	if err != nil {
		t.Fatalf("jobs stream info: %v", err)
	}
	n := 0
	for subject, count := range info.State.Subjects {
		if strings.HasPrefix(subject, "toolbus.jobs.queue.") || strings.HasPrefix(subject, "toolbus.jobs.run.") {
			n += int(count)
		}
	}
	return n
}

func waitState(t *testing.T, s *jobs.Service, id string, want schema.JobState) *schema.JobRecord {
	t.Helper()
	return waitFor(t, s, id, string(want), func(r *schema.JobRecord) bool { return r.State == want })
}

// errorData decodes an error's data object.
func errorData(t *testing.T, e *schema.Error) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("error data %s: %v", e.Data, err)
	}
	return d
}

func isErr(e *schema.Error, target error) bool { return e != nil && errors.Is(e, target) }

// startOnce starts a server on dir that the test stops itself.
func startOnce(dir string) (*bus.Embedded, error) {
	return bus.StartEmbedded(bus.EmbeddedConfig{DataDir: dir})
}

func mustJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
