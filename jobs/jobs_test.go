package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func echoTools(rt *worker.Runtime) error {
	return rt.HandleFunc("echo", func(ctx context.Context, req *worker.Request) (any, error) {
		return req.Params, nil
	})
}

func TestSubmitPollResult(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		if err := echoTools(rt); err != nil {
			return err
		}
		return rt.HandleFunc("fail", func(ctx context.Context, req *worker.Request) (any, error) {
			return nil, schema.NewError(2001, "insufficient funds", map[string]any{"balance": 3})
		})
	}))

	for _, tc := range []struct {
		name, method, params string
		state                schema.JobState
		result               string
		code                 int
	}{
		{name: "result", method: "echo", params: `{"hello":"world"}`, state: schema.JobSucceeded, result: `{"hello":"world"}`},
		{name: "big integer kept", method: "echo", params: `[12345678901234567890]`, state: schema.JobSucceeded, result: `[12345678901234567890]`},
		{name: "tool error", method: "fail", params: `{}`, state: schema.JobFailed, code: 2001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := submit(t, s, tc.method, tc.params)
			r := waitFor(t, s, id, "finished", func(r *schema.JobRecord) bool { return r.State.Final() })
			if r.State != tc.state {
				t.Fatalf("state = %s (%+v), want %s", r.State, r.Error, tc.state)
			}
			if string(r.Result) != tc.result {
				t.Errorf("result = %s, want %s", r.Result, tc.result)
			}
			if tc.code != 0 && (r.Error == nil || r.Error.Code != tc.code) {
				t.Errorf("error = %+v, want code %d", r.Error, tc.code)
			}
			if r.Attempts != 1 || r.StartedAt == nil || r.FinishedAt == nil || r.Method != tc.method {
				t.Errorf("record = %+v, want 1 attempt, start and finish times, method %s", r, tc.method)
			}
			if string(r.Params) != tc.params {
				t.Errorf("params = %s, want %s", r.Params, tc.params)
			}
		})
	}
}

// TestContextIDKept checks that a submit's context_id is on the job's
// record as another service reads it.
func TestContextIDKept(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, `{"method":"echo","params":{},"context_id":"conversation-7"}`)
	if rpcErr != nil {
		t.Fatalf("submit with context_id: %v", rpcErr)
	}
	var sub schema.JobSubmitResult
	if err := json.Unmarshal(res, &sub); err != nil {
		t.Fatal(err)
	}
	r, rpcErr := get(t, newService(t, js), sub.ID)
	if rpcErr != nil {
		t.Fatalf("get: %v", rpcErr)
	}
	if r.ContextID != "conversation-7" {
		t.Errorf("context_id = %q, want %q", r.ContextID, "conversation-7")
	}
}

func TestHundredSubmits(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newRuntime(t, nc, echoTools), jobs.WithRunConcurrency(32))
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = submit(t, s, "echo", fmt.Sprintf(`{"n":%d}`, i))
	}
	for i, id := range ids {
		r := waitState(t, s, id, schema.JobSucceeded)
		if want := fmt.Sprintf(`{"n":%d}`, i); string(r.Result) != want {
			t.Errorf("job %d result = %s, want %s", i, r.Result, want)
		}
	}
}

func TestCancelQueued(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	var runs sync.Map
	tools := func(rt *worker.Runtime) error {
		return rt.HandleFunc("count", func(ctx context.Context, req *worker.Request) (any, error) {
			runs.Store(string(req.ID), true)
			return "ran", nil
		})
	}
	canceled := submit(t, s, "count", `{}`)
	res, rpcErr := rpc(t, s, "", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, canceled))
	if rpcErr != nil {
		t.Fatalf("cancel: %v", rpcErr)
	}
	var rec schema.JobRecord
	json.Unmarshal(res, &rec)
	if rec.State != schema.JobCanceled || rec.Error == nil || rec.Error.Code != schema.CodeCanceled {
		t.Fatalf("cancel answered %s, want a canceled record", res)
	}
	// Canceling again is not an error.
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, canceled)); rpcErr != nil {
		t.Fatalf("second cancel: %v", rpcErr)
	}
	startRunner(t, js, newRuntime(t, nc, tools))
	// A job queued after the canceled one has run, so the runner has seen
	// the canceled one's message.
	later := submit(t, s, "count", `{}`)
	waitState(t, s, later, schema.JobSucceeded)
	if r, _ := get(t, s, canceled); r.State != schema.JobCanceled || r.Attempts != 0 {
		t.Errorf("canceled job = %s, %d attempts; want canceled, 0 attempts", r.State, r.Attempts)
	}
	if _, ran := runs.Load(fmt.Sprintf("%q", canceled)); ran {
		t.Error("the canceled job ran")
	}
}

func TestCancelRunning(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	var calls atomic.Int32
	sawCancel := make(chan error, 1)
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("block", func(ctx context.Context, req *worker.Request) (any, error) {
			calls.Add(1)
			<-ctx.Done()
			sawCancel <- ctx.Err()
			return nil, ctx.Err()
		}, worker.RetrySafe())
	}), jobs.WithLease(time.Second))
	id := submit(t, s, "block", `{}`)
	waitState(t, s, id, schema.JobRunning)
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, id)); rpcErr != nil {
		t.Fatalf("cancel: %v", rpcErr)
	}
	select {
	case err := <-sawCancel:
		if err != context.Canceled {
			t.Errorf("handler's ctx.Err() = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not canceled")
	}
	// A canceled job is never delivered again: its message is
	// acknowledged, which takes it off the work-queue stream.
	toolbustest.Eventually(t, func() bool { return queuedMessages(t, js) == 0 }, "the canceled job's message is acknowledged")
	r, _ := get(t, s, id)
	if r.State != schema.JobCanceled || r.Attempts != 1 || calls.Load() != 1 {
		t.Errorf("job = %s, %d attempts, %d calls; want canceled, 1, 1", r.State, r.Attempts, calls.Load())
	}
	// A finished job cannot be canceled.
	startRunner(t, js, newRuntime(t, nc, echoTools))
	done := submit(t, s, "echo", `{}`)
	waitState(t, s, done, schema.JobSucceeded)
	_, rpcErr := rpc(t, s, "", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, done))
	if !isErr(rpcErr, schema.ErrInvalidParams) || errorData(t, rpcErr)["reason"] != "job_finished" {
		t.Errorf("cancel of a finished job = %v, want -32602 job_finished", rpcErr)
	}
}

// blockOnce serves method: its first call blocks until its context ends
// and signals started; later calls succeed.
func blockOnce(method string, retryable bool, started chan<- struct{}, calls *atomic.Int32) func(rt *worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		var opts []worker.HandleOption
		if retryable {
			opts = append(opts, worker.RetrySafe())
		}
		return rt.HandleFunc(method, func(ctx context.Context, req *worker.Request) (any, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return "second run", nil
		}, opts...)
	}
}

func TestWorkerKilled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retryable bool
		state     schema.JobState
		attempts  int
		calls     int32
	}{
		{name: "retryable runs again", retryable: true, state: schema.JobSucceeded, attempts: 2, calls: 2},
		{name: "not retryable fails", retryable: false, state: schema.JobFailed, attempts: 1, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startServer(t, "")
			_, js := connect(t, e)
			s := newService(t, js)
			started := make(chan struct{})
			var calls atomic.Int32
			tools := blockOnce("crawl", tc.retryable, started, &calls)

			nc1, js1 := connect(t, e)
			startRunner(t, js1, newRuntime(t, nc1, tools), jobs.WithLease(time.Second))
			id := submit(t, s, "crawl", `{}`)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not start")
			}
			nc1.Close() // the first worker dies mid-job

			nc2, js2 := connect(t, e)
			startRunner(t, js2, newRuntime(t, nc2, tools), jobs.WithLease(time.Second))
			r := waitFor(t, s, id, "finished", func(r *schema.JobRecord) bool { return r.State.Final() })
			if r.State != tc.state || r.Attempts != tc.attempts || calls.Load() != tc.calls {
				t.Fatalf("job = %s, %d attempts, %d calls (%+v); want %s, %d, %d",
					r.State, r.Attempts, calls.Load(), r.Error, tc.state, tc.attempts, tc.calls)
			}
			if tc.state == schema.JobFailed {
				if r.Error == nil || errorData(t, r.Error)["reason"] != "interrupted_not_retryable" {
					t.Errorf("error = %+v, want data.reason interrupted_not_retryable", r.Error)
				}
			} else if string(r.Result) != `"second run"` {
				t.Errorf("result = %s, want the second run's", r.Result)
			}
		})
	}
}

func TestRestartKeepsJobs(t *testing.T) {
	dir := t.TempDir()
	var done, queued string
	{
		e, err := startOnce(dir)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		js := mustJS(t, nc)
		s, err := jobs.New(js, jobs.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		r, err := jobs.NewRunner(js, newRuntime(t, nc, echoTools), jobs.WithRunnerLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		done = submit(t, s, "echo", `{"kept":true}`)
		waitState(t, s, done, schema.JobSucceeded)
		queued = submit(t, s, "later", `{"x":1}`) // nobody serves it yet
		shutdownRunner(t, r)
		nc.Close()
		e.Shutdown()
	}
	e := startServer(t, dir)
	nc, js := connect(t, e)
	s := newService(t, js)
	r, rpcErr := get(t, s, done)
	if rpcErr != nil || r.State != schema.JobSucceeded || string(r.Result) != `{"kept":true}` {
		t.Fatalf("after restart get(done) = %+v, %v; want succeeded with its result", r, rpcErr)
	}
	if r, rpcErr := get(t, s, queued); rpcErr != nil || r.State != schema.JobQueued {
		t.Fatalf("after restart get(queued) = %+v, %v; want queued", r, rpcErr)
	}
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("later", func(ctx context.Context, req *worker.Request) (any, error) { return "ran", nil })
	}))
	if r := waitState(t, s, queued, schema.JobSucceeded); string(r.Result) != `"ran"` {
		t.Errorf("queued job result = %s, want \"ran\"", r.Result)
	}
}

func TestIdempotentSubmit(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	submitAs := func(caller, key string) string {
		t.Helper()
		res, rpcErr := rpc(t, s, caller, schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"echo","params":{},"idempotency_key":%q}`, key))
		if rpcErr != nil {
			t.Fatalf("submit: %v", rpcErr)
		}
		var r schema.JobSubmitResult
		json.Unmarshal(res, &r)
		return r.ID
	}
	// Racing submits with one key make one job.
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i] = submitAs("alice", "k1") })
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("racing submits with one key = %v, want one id", ids)
		}
	}
	for _, tc := range []struct {
		name, caller, key string
		same              bool
	}{
		{"same caller and key", "alice", "k1", true},
		{"other key", "alice", "k2", false},
		{"other caller", "bob", "k1", false},
		{"anonymous", "", "k1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := submitAs(tc.caller, tc.key); (got == ids[0]) != tc.same {
				t.Errorf("submit(%q, %q) = %s, first %s; want same=%v", tc.caller, tc.key, got, ids[0], tc.same)
			}
		})
	}
}

// TestIdempotencyKeyRefusesOtherParams checks that a key names one job:
// submitting another method, other params, another notify_url, context_id
// or references under it
// is refused -32600 naming the key, as the synchronous Idempotency-Key
// header does, and the first job stays the key's.
func TestIdempotencyKeyRefusesOtherParams(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	// The receiver is allowed on loopback; no job runs, so nothing is sent.
	s := newService(t, js, jobs.WithCallbackSecret([]byte("a callback secret of 32 bytes...")), jobs.WithCallbackAllow("127.0.0.1"))
	const first = `{"method":"echo","params":{"n":1},"idempotency_key":"k1"}`
	res, rpcErr := rpc(t, s, "alice", schema.MethodJobsSubmit, first)
	if rpcErr != nil {
		t.Fatalf("first submit: %v", rpcErr)
	}
	var job schema.JobSubmitResult
	if err := json.Unmarshal(res, &job); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, params string
	}{
		{"other params", `{"method":"echo","params":{"n":2},"idempotency_key":"k1"}`},
		{"no params", `{"method":"echo","idempotency_key":"k1"}`},
		{"other method", `{"method":"sleep","params":{"n":1},"idempotency_key":"k1"}`},
		{"a notify_url", `{"method":"echo","params":{"n":1},"idempotency_key":"k1","notify_url":"http://127.0.0.1:1/done"}`},
		{"a context_id", `{"method":"echo","params":{"n":1},"idempotency_key":"k1","context_id":"c"}`},
		{"references", `{"method":"echo","params":{"n":1},"idempotency_key":"k1","references":["c"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, rpcErr := rpc(t, s, "alice", schema.MethodJobsSubmit, tc.params)
			if !isErr(rpcErr, schema.ErrInvalidRequest) {
				t.Fatalf("submit %s = %s %v, want -32600", tc.params, res, rpcErr)
			}
			d := errorData(t, rpcErr)
			if d["reason"] != "idempotency_key_reused" || d["idempotency_key"] != "k1" || d["id"] != job.ID {
				t.Errorf("error data = %v, want reason idempotency_key_reused, the key and job %s", d, job.ID)
			}
			if !strings.Contains(rpcErr.Message, `"k1"`) {
				t.Errorf("message %q does not name the key", rpcErr.Message)
			}
		})
	}
	res, rpcErr = rpc(t, s, "alice", schema.MethodJobsSubmit, first)
	var again schema.JobSubmitResult
	if rpcErr != nil || json.Unmarshal(res, &again) != nil || again.ID != job.ID {
		t.Errorf("the same submit again = %s %v, want job %s", res, rpcErr, job.ID)
	}
}

func TestTTL(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js, jobs.WithTTL(time.Second))
	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		if err := echoTools(rt); err != nil {
			return err
		}
		return rt.HandleFunc("wait", func(ctx context.Context, req *worker.Request) (any, error) {
			select {
			case <-release:
				return "released", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}))
	defer close(release)
	running := submit(t, s, "wait", `{}`)
	waitState(t, s, running, schema.JobRunning)
	done := submit(t, s, "echo", `{}`)
	waitState(t, s, done, schema.JobSucceeded)
	toolbustest.Eventually(t, func() bool {
		_, rpcErr := get(t, s, done)
		return isErr(rpcErr, schema.ErrJobNotFound)
	}, "the finished job is gone after its TTL")
	if r, rpcErr := get(t, s, running); rpcErr != nil || r.State != schema.JobRunning {
		t.Fatalf("running job = %+v, %v; want still running", r, rpcErr)
	}
}

func TestPollOnAnotherService(t *testing.T) {
	e := startServer(t, "")
	nc, js1 := connect(t, e)
	_, js2 := connect(t, e)
	s1, s2 := newService(t, js1), newService(t, js2)
	startRunner(t, js1, newRuntime(t, nc, echoTools))
	id := submit(t, s1, "echo", `{"via":"one"}`)
	if r := waitState(t, s2, id, schema.JobSucceeded); string(r.Result) != `{"via":"one"}` {
		t.Errorf("result via the second service = %s", r.Result)
	}
}

// TestServiceBringsStoreToItsLimits starts services on a stream a runner
// made: one with the limits the stream has, one with others, which the
// stream takes.
func TestServiceBringsStoreToItsLimits(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	startRunner(t, js, newRuntime(t, nc, echoTools))
	maxMsgs := func() int64 {
		t.Helper()
		st, err := js.Stream(context.Background(), "TOOLBUS_JOBS")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxMsgs
	}
	for _, tc := range []struct {
		name      string
		maxQueued int64
	}{
		{"the runner's limits", jobs.DefaultMaxQueued},
		{"other limits", 5},
		{"the same again", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newService(t, js, jobs.WithMaxQueued(tc.maxQueued))
			if got := maxMsgs(); got != tc.maxQueued {
				t.Errorf("stream MaxMsgs = %d, want %d", got, tc.maxQueued)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("build", func(ctx context.Context, req *worker.Request) (any, error) {
			worker.Progress(ctx, 10, "starting")
			worker.Progress(ctx, 50, "half way")
			<-release
			worker.Progress(ctx, 100, "done")
			return "built", nil
		})
	}))
	id := submit(t, s, "build", `{}`)
	r := waitFor(t, s, id, "progress 50", func(r *schema.JobRecord) bool { return r.Progress != nil && r.Progress.Percent == 50 })
	if r.State != schema.JobRunning || r.Progress.Message != "half way" {
		t.Errorf("record = %s, %+v; want running, half way", r.State, r.Progress)
	}
	close(release)
	if r := waitState(t, s, id, schema.JobSucceeded); r.Progress == nil || r.Progress.Percent != 100 {
		t.Errorf("final progress = %+v, want 100", r.Progress)
	}
}

func TestList(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	startRunner(t, js, newRuntime(t, nc, echoTools))
	var all []string
	for range 5 {
		id := submit(t, s, "echo", `{}`)
		waitState(t, s, id, schema.JobSucceeded)
		all = append(all, id)
	}
	for range 3 {
		all = append(all, submit(t, s, "nobody.serves", `{}`))
		time.Sleep(2 * time.Millisecond) // distinct milliseconds keep the order exact
	}
	list := func(caller, params string) schema.JobList {
		t.Helper()
		res, rpcErr := rpc(t, s, caller, schema.MethodJobsList, params)
		if rpcErr != nil {
			t.Fatalf("list %s: %v", params, rpcErr)
		}
		var r schema.JobList
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Paging by two visits every job once, newest first.
	var paged []string
	cursor := ""
	for page := 0; ; page++ {
		params := `{"limit":2}`
		if cursor != "" {
			params = fmt.Sprintf(`{"limit":2,"cursor":%q}`, cursor)
		}
		r := list("", params)
		for _, j := range r.Jobs {
			paged = append(paged, j.ID)
			if j.Params != nil || j.Result != nil {
				t.Errorf("list item %s carries params or result", j.ID)
			}
		}
		if r.NextCursor == "" {
			break
		}
		if page > 10 {
			t.Fatal("list does not end")
		}
		cursor = r.NextCursor
	}
	if len(paged) != len(all) {
		t.Fatalf("paged ids = %v, want %d jobs", paged, len(all))
	}
	for i, id := range paged {
		if want := all[len(all)-1-i]; id != want {
			t.Errorf("page item %d = %s, want %s (newest first)", i, id, want)
		}
	}
	for _, tc := range []struct {
		name, caller, params string
		want                 int
	}{
		{"queued", "", `{"state":"queued"}`, 3},
		{"succeeded", "", `{"state":"succeeded"}`, 5},
		{"method", "", `{"method":"echo"}`, 5},
		{"method and state", "", `{"method":"echo","state":"queued"}`, 0},
		{"no filter", "", `{}`, 8},
		{"another caller", "mallory", `{}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(tc.caller, tc.params); len(got.Jobs) != tc.want {
				t.Errorf("list(%s) = %d jobs, want %d", tc.params, len(got.Jobs), tc.want)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js, jobs.WithMaxParamsBytes(64), jobs.WithListLimits(5, 10))
	id := submit(t, s, "echo", `{}`)
	unknown := "00000000000000000000000000"
	for _, tc := range []struct {
		name, method, params string
		want                 error
		field, limit         string
	}{
		{name: "unknown rpc.jobs method", method: "rpc.jobs.nope", params: `{}`, want: schema.ErrMethodNotFound},
		{name: "params not an object", method: schema.MethodJobsSubmit, params: `["echo"]`, want: schema.ErrInvalidParams},
		{name: "submit without method", method: schema.MethodJobsSubmit, params: `{"params":{}}`, want: schema.ErrInvalidParams, field: "/method"},
		{name: "method of wrong type", method: schema.MethodJobsSubmit, params: `{"method":5}`, want: schema.ErrInvalidParams, field: "/method"},
		{name: "invalid method name", method: schema.MethodJobsSubmit, params: `{"method":"a..b"}`, want: schema.ErrInvalidParams, field: "/method"},
		{name: "wildcard method", method: schema.MethodJobsSubmit, params: `{"method":"math.*"}`, want: schema.ErrInvalidParams, field: "/method"},
		{name: "reserved method", method: schema.MethodJobsSubmit, params: `{"method":"rpc.jobs.get"}`, want: schema.ErrInvalidParams, field: "/method"},
		{name: "unknown member", method: schema.MethodJobsSubmit, params: `{"method":"echo","priority":1}`, want: schema.ErrInvalidParams, field: "/priority"},
		{name: "scalar job params", method: schema.MethodJobsSubmit, params: `{"method":"echo","params":5}`, want: schema.ErrInvalidParams, field: "/params"},
		{name: "params too big", method: schema.MethodJobsSubmit, params: `{"method":"echo","params":{"data":"` + string(make([]byte, 0)) + `0123456789012345678901234567890123456789012345678901234567890123456789"}}`, want: schema.ErrLimitExceeded, limit: "max_params_bytes"},
		{name: "empty idempotency key", method: schema.MethodJobsSubmit, params: `{"method":"echo","idempotency_key":""}`, want: schema.ErrInvalidParams, field: "/idempotency_key"},
		{name: "notify_url without a secret", method: schema.MethodJobsSubmit, params: `{"method":"echo","notify_url":"https://example.com/hook"}`, want: schema.ErrInvalidParams, field: "/notify_url"},
		{name: "notify_url not http", method: schema.MethodJobsSubmit, params: `{"method":"echo","notify_url":"file:///etc/passwd"}`, want: schema.ErrInvalidParams, field: "/notify_url"},
		{name: "context id too long", method: schema.MethodJobsSubmit, params: `{"method":"echo","context_id":"` + strings.Repeat("c", jobs.MaxContextIDBytes+1) + `"}`, want: schema.ErrLimitExceeded, limit: "max_context_id_bytes"},
		{name: "too many references", method: schema.MethodJobsSubmit, params: `{"method":"echo","references":["r"` + strings.Repeat(`,"r"`, jobs.MaxReferences) + `]}`, want: schema.ErrLimitExceeded, limit: "max_references"},
		{name: "empty reference", method: schema.MethodJobsSubmit, params: `{"method":"echo","references":[""]}`, want: schema.ErrInvalidParams, field: "/references"},
		{name: "reference too long", method: schema.MethodJobsSubmit, params: `{"method":"echo","references":["` + strings.Repeat("r", jobs.MaxReferenceBytes+1) + `"]}`, want: schema.ErrLimitExceeded, limit: "max_reference_bytes"},
		{name: "message without id", method: schema.MethodJobsSubmit, params: `{"method":"echo","message":{"text":"hi"}}`, want: schema.ErrInvalidParams, field: "/message/id"},
		{name: "message data not an object", method: schema.MethodJobsSubmit, params: `{"method":"echo","message":{"id":"m","data":[1]}}`, want: schema.ErrInvalidParams, field: "/message/data"},
		{name: "message content not an object", method: schema.MethodJobsSubmit, params: `{"method":"echo","message":{"id":"m","content":"x"}}`, want: schema.ErrInvalidParams, field: "/message/content"},
		{name: "get without id", method: schema.MethodJobsGet, params: `{}`, want: schema.ErrInvalidParams, field: "/id"},
		{name: "get malformed id", method: schema.MethodJobsGet, params: `{"id":"nope"}`, want: schema.ErrInvalidParams, field: "/id"},
		{name: "get unknown id", method: schema.MethodJobsGet, params: `{"id":"` + unknown + `"}`, want: schema.ErrJobNotFound},
		{name: "cancel unknown id", method: schema.MethodJobsCancel, params: `{"id":"` + unknown + `"}`, want: schema.ErrJobNotFound},
		{name: "list bad state", method: schema.MethodJobsList, params: `{"state":"done"}`, want: schema.ErrInvalidParams, field: "/state"},
		{name: "list zero limit", method: schema.MethodJobsList, params: `{"limit":0}`, want: schema.ErrInvalidParams, field: "/limit"},
		{name: "list limit too big", method: schema.MethodJobsList, params: `{"limit":11}`, want: schema.ErrLimitExceeded, limit: "max_list_limit"},
		{name: "list bad cursor", method: schema.MethodJobsList, params: `{"cursor":"abc"}`, want: schema.ErrInvalidParams, field: "/cursor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rpcErr := rpc(t, s, "", tc.method, tc.params)
			if !isErr(rpcErr, tc.want) {
				t.Fatalf("%s(%s) = %v, want %v", tc.method, tc.params, rpcErr, tc.want)
			}
			data := map[string]any{}
			if len(rpcErr.Data) > 0 {
				data = errorData(t, rpcErr)
			}
			if tc.field != "" && data["field"] != tc.field {
				t.Errorf("%s(%s) data = %s, want field %q", tc.method, tc.params, rpcErr.Data, tc.field)
			}
			if tc.limit != "" && data["limit"] != tc.limit {
				t.Errorf("%s(%s) data = %s, want limit %q", tc.method, tc.params, rpcErr.Data, tc.limit)
			}
		})
	}
	// Another caller cannot see or cancel the job.
	if _, rpcErr := rpc(t, s, "mallory", schema.MethodJobsGet, fmt.Sprintf(`{"id":%q}`, id)); !isErr(rpcErr, schema.ErrJobNotFound) {
		t.Errorf("get by another caller = %v, want job not found", rpcErr)
	}
	if _, rpcErr := rpc(t, s, "mallory", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, id)); !isErr(rpcErr, schema.ErrJobNotFound) {
		t.Errorf("cancel by another caller = %v, want job not found", rpcErr)
	}
}

func TestOptions(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	for _, tc := range []struct {
		name string
		opt  jobs.Option
	}{
		{"zero subjects", jobs.WithSubjects(bus.Subjects{})},
		{"replicas", jobs.WithReplicas(0)},
		{"ttl", jobs.WithTTL(10 * time.Millisecond)},
		{"attempts", jobs.WithMaxAttempts(0)},
		{"queued", jobs.WithMaxQueued(0)},
		{"store bytes", jobs.WithStoreBytes(1<<30, 10)},
		{"params", jobs.WithMaxParamsBytes(0)},
		{"list", jobs.WithListLimits(10, 5)},
		{"secret", jobs.WithCallbackSecret([]byte("short"))},
		{"callback timeout", jobs.WithCallbackTimeout(0)},
		{"callback timeout too long", jobs.WithCallbackTimeout(time.Hour)},
		{"callback allowlist", jobs.WithCallbackAllow("*.internal")},
		{"retry", jobs.WithCallbackRetry(3, time.Second, time.Millisecond)},
		{"logger", jobs.WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := jobs.New(js, tc.opt); err == nil {
				t.Errorf("New with bad %s option succeeded, want an error", tc.name)
			}
		})
	}
	rt := newRuntime(t, nc, echoTools)
	for _, tc := range []struct {
		name string
		opt  jobs.RunnerOption
	}{
		{"lease", jobs.WithLease(time.Millisecond)},
		{"concurrency", jobs.WithRunConcurrency(0)},
		{"deliver", jobs.WithMaxDeliver(1)},
		{"progress", jobs.WithProgressInterval(0)},
		{"run time", jobs.WithMaxRunTime(0)},
		{"fetch", jobs.WithFetchWait(0)},
		{"zero subjects", jobs.WithRunnerSubjects(bus.Subjects{})},
	} {
		t.Run("runner "+tc.name, func(t *testing.T) {
			if _, err := jobs.NewRunner(js, rt, tc.opt); err == nil {
				t.Errorf("NewRunner with bad %s option succeeded, want an error", tc.name)
			}
		})
	}
}
