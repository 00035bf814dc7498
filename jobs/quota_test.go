package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// TestStoreHasByteCaps: the queue stream and the bucket of records are
// created with byte caps, and a submit the full queue cannot take is
// refused -32006 naming job_queue_max_bytes.
func TestStoreHasByteCaps(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js, jobs.WithStoreBytes(1<<20, 2<<20))
	ctx := context.Background()
	st, err := js.Stream(ctx, "TOOLBUS_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 1<<20 {
		t.Errorf("queue stream MaxBytes = %d, want %d", got, 1<<20)
	}
	info, err := js.Stream(ctx, "KV_toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().Config.MaxBytes; got != 2<<20 {
		t.Errorf("records bucket MaxBytes = %d, want %d", got, 2<<20)
	}

	// Nobody runs the jobs: 100 KB each fill the 1 MiB queue.
	params, _ := json.Marshal(map[string]any{"method": "echo", "params": []string{strings.Repeat("x", 100<<10)}})
	for i := range 20 {
		_, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, string(params))
		if rpcErr == nil {
			continue
		}
		if !errors.Is(rpcErr, schema.ErrLimitExceeded) || !strings.Contains(string(rpcErr.Data), `"limit":"job_queue_max_bytes"`) {
			t.Fatalf("submit %d into a full queue = %d %s %s, want -32006 naming job_queue_max_bytes", i, rpcErr.Code, rpcErr.Message, rpcErr.Data)
		}
		return
	}
	t.Fatal("2 MB of jobs went into a 1 MiB queue")
}

// submitAs submits a job of method for caller and returns the refusal, if
// any.
func submitAs(t *testing.T, s *jobs.Service, caller, method, params string) *schema.Error {
	t.Helper()
	p, _ := json.Marshal(map[string]any{"method": method, "params": json.RawMessage(params)})
	_, rpcErr := rpc(t, s, caller, schema.MethodJobsSubmit, string(p))
	return rpcErr
}

// TestCallerMaxQueued: a caller with its bound of jobs queued has its next
// submit refused -32006 naming caller_max_queued_jobs, while another
// caller's submit goes on; the anonymous caller has no bound of its own.
func TestCallerMaxQueued(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js, jobs.WithCallerMaxQueued(3))
	for i := range 3 {
		if err := submitAs(t, s, "flood", "echo", `[1]`); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	err := submitAs(t, s, "flood", "echo", `[1]`)
	if !errors.Is(err, schema.ErrLimitExceeded) {
		t.Fatalf("a fourth job = %v, want -32006", err)
	}
	var data struct {
		Limit string `json:"limit"`
		Max   int    `json:"max"`
		Got   int    `json:"got"`
	}
	if json.Unmarshal(err.Data, &data) != nil || data.Limit != "caller_max_queued_jobs" || data.Max != 3 || data.Got != 3 {
		t.Errorf("refusal data = %s, want limit caller_max_queued_jobs, max 3, got 3", err.Data)
	}
	if err := submitAs(t, s, "quiet", "echo", `[1]`); err != nil {
		t.Fatalf("another caller's submit = %v, want it queued", err)
	}
	for i := range 4 {
		if err := submitAs(t, s, "", "echo", `[1]`); err != nil {
			t.Fatalf("anonymous submit %d = %v, want it queued", i, err)
		}
	}
}

// TestFairDispatch: with one slot busy with a caller's long backlog,
// another caller's new job starts at the next free slot or the one after,
// not behind the backlog.
func TestFairDispatch(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	started := make(chan string, 128)
	release := make(chan struct{})
	rt := newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("work", func(ctx context.Context, req *worker.Request) (any, error) {
			started <- req.Caller
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "done", nil
		})
	})
	startRunner(t, js, rt, jobs.WithRunConcurrency(1))
	const backlog = 40
	for i := range backlog {
		if err := submitAs(t, s, "flood", "work", `[`+strconv.Itoa(i)+`]`); err != nil {
			t.Fatal(err)
		}
	}
	if c := <-started; c != "flood" {
		t.Fatalf("first job started for %q, want flood", c)
	}
	if err := submitAs(t, s, "quiet", "work", `[0]`); err != nil {
		t.Fatal(err)
	}
	defer close(release)
	for n := 1; ; n++ {
		release <- struct{}{}
		c := <-started
		if c == "quiet" {
			t.Logf("the other caller's job started after %d of the backlog's", n)
			if n > 2 {
				t.Errorf("the other caller's job started after %d of %d backlog jobs, want at most 2", n, backlog)
			}
			return
		}
		if n == backlog {
			t.Fatal("the other caller's job waited for the whole backlog")
		}
	}
}

// TestLegacyQueuedJobsRun: a job queued on the method's subject alone, as
// before per-caller queues, still runs once a runner starts.
func TestLegacyQueuedJobsRun(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	id, err := jobs.QueueLegacy(context.Background(), s, "echo", []byte(`["old"]`))
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, js, newRuntime(t, nc, echoTools))
	rec := waitFor(t, s, id, "succeeded", func(r *schema.JobRecord) bool { return r.State == schema.JobSucceeded })
	if string(rec.Result) != `["old"]` {
		t.Errorf("result = %s, want [\"old\"]", rec.Result)
	}
}
