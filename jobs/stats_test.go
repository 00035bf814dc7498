package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// outcomeTools serves echo, which succeeds, and fail, which fails.
func outcomeTools(rt *worker.Runtime) error {
	if err := echoTools(rt); err != nil {
		return err
	}
	return rt.HandleFunc("fail", func(ctx context.Context, req *worker.Request) (any, error) {
		return nil, schema.NewError(2001, "insufficient funds", nil)
	})
}

// cancelJob cancels job id as the anonymous caller.
func cancelJob(t *testing.T, s *jobs.Service, id string) {
	t.Helper()
	if _, rpcErr := rpc(t, s, "", schema.MethodJobsCancel, fmt.Sprintf(`{"id":%q}`, id)); rpcErr != nil {
		t.Fatalf("cancel %s: %v", id, rpcErr)
	}
}

func stats(t *testing.T, s *jobs.Service, recent int) jobs.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.Stats(ctx, recent)
	if err != nil {
		t.Fatalf("Stats(%d): %v", recent, err)
	}
	return st
}

func TestStats(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)

	if st := stats(t, s, 5); len(st.Recent) != 0 || st.Truncated || len(st.ByState) != 6 {
		t.Errorf("Stats of no jobs = %+v, want every state at 0, no recent jobs", st)
	}

	// block runs until its job is canceled, then closes stopped.
	stopped := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		if err := outcomeTools(rt); err != nil {
			return err
		}
		return rt.HandleFunc("block", func(ctx context.Context, req *worker.Request) (any, error) {
			defer close(stopped)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	}))
	var ids []string
	add := func(method string, want schema.JobState) string {
		t.Helper()
		id := submit(t, s, method, `{"big":"params"}`)
		waitState(t, s, id, want)
		ids = append(ids, id)
		return id
	}
	add("echo", schema.JobSucceeded)
	add("echo", schema.JobSucceeded)
	add("fail", schema.JobFailed)
	cancelJob(t, s, add("nobody.serves", schema.JobQueued))
	add("nobody.serves", schema.JobQueued)
	running := add("block", schema.JobRunning)
	// The runner holds the job until it is canceled; the cancel must
	// reach it before it shuts down.
	t.Cleanup(func() {
		cancelJob(t, s, running)
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Error("the running job was not canceled")
		}
	})

	want := map[schema.JobState]int{
		schema.JobQueued: 1, schema.JobRunning: 1, schema.JobInputRequired: 0, schema.JobSucceeded: 2, schema.JobFailed: 1, schema.JobCanceled: 1,
	}
	// The backlog by method: the queued and running jobs only.
	wantOpen := map[string]jobs.OpenJobs{"nobody.serves": {Queued: 1}, "block": {Running: 1}}
	for _, tc := range []struct {
		name   string
		recent int
		want   int
	}{
		{name: "none", recent: 0, want: 0},
		{name: "negative", recent: -1, want: 0},
		{name: "capped", recent: 3, want: 3},
		{name: "all", recent: 100, want: len(ids)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := stats(t, s, tc.recent)
			if !maps.Equal(st.ByState, want) || st.Truncated {
				t.Errorf("Stats().ByState = %v, truncated %v; want %v, not truncated", st.ByState, st.Truncated, want)
			}
			if !maps.Equal(st.Open, wantOpen) {
				t.Errorf("Stats().Open = %v, want %v", st.Open, wantOpen)
			}
			if len(st.Recent) != tc.want {
				t.Fatalf("Stats(%d) = %d recent jobs, want %d", tc.recent, len(st.Recent), tc.want)
			}
			for i, r := range st.Recent {
				if wantID := ids[len(ids)-1-i]; r.ID != wantID {
					t.Errorf("Recent[%d] = %s, want %s (newest first)", i, r.ID, wantID)
				}
				if r.Params != nil || r.Result != nil {
					t.Errorf("Recent[%d] carries params %s or result %s, want neither", i, r.Params, r.Result)
				}
			}
		})
	}

	// A record deleted after the ids are listed leaves its key behind (a
	// delete marker), which Stats skips rather than failing.
	kv, err := js.KeyValue(context.Background(), "toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), "job."+ids[0]); err != nil {
		t.Fatal(err)
	}
	st := stats(t, s, 100)
	if got := st.ByState[schema.JobSucceeded]; got != 1 {
		t.Errorf("Stats().ByState[succeeded] after a delete = %d, want 1", got)
	}
	if len(st.Recent) != len(ids)-1 || st.Recent[len(st.Recent)-1].ID != ids[1] {
		t.Errorf("Stats().Recent after a delete = %d jobs, want %d without %s", len(st.Recent), len(ids)-1, ids[0])
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Stats(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Stats(canceled ctx) = %v, want context.Canceled", err)
	}
}

func TestStatsTruncated(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	const n = jobs.MaxStatsRecords + 10
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				call := schema.Call{Request: schema.Request{Method: schema.MethodJobsSubmit, Params: []byte(`{"method":"nobody.serves"}`)}}
				if _, rpcErr := s.ServeRPC(context.Background(), call); rpcErr != nil {
					t.Errorf("submit %d: %v", i, rpcErr)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	newest := submit(t, s, "nobody.serves", `{}`)
	cancelJob(t, s, newest)

	st := stats(t, s, 1)
	if !st.Truncated {
		t.Error("Stats().Truncated = false, want true")
	}
	want := map[schema.JobState]int{schema.JobQueued: jobs.MaxStatsRecords - 1, schema.JobCanceled: 1,
		schema.JobRunning: 0, schema.JobInputRequired: 0, schema.JobSucceeded: 0, schema.JobFailed: 0}
	if !maps.Equal(st.ByState, want) {
		t.Errorf("Stats().ByState = %v, want %v", st.ByState, want)
	}
	if len(st.Recent) != 1 || st.Recent[0].ID != newest {
		t.Errorf("Stats().Recent = %+v, want only %s", st.Recent, newest)
	}
}

// TestCallerStats checks that a caller's stats count and list its own
// jobs alone.
func TestCallerStats(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	submitAs := func(caller string) string {
		t.Helper()
		res, rpcErr := rpc(t, s, caller, schema.MethodJobsSubmit, `{"method":"nobody.serves"}`)
		if rpcErr != nil {
			t.Fatalf("submit as %q: %v", caller, rpcErr)
		}
		var r schema.JobSubmitResult
		if err := json.Unmarshal(res, &r); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	var alice []string
	for _, caller := range []string{"alice", "bob", "alice", "", "bob", "alice"} {
		id := submitAs(caller)
		if caller == "alice" {
			alice = append(alice, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.CallerStats(ctx, "alice", 2)
	if err != nil {
		t.Fatalf("CallerStats(alice): %v", err)
	}
	if st.ByState[schema.JobQueued] != len(alice) {
		t.Errorf("CallerStats(alice).ByState = %v, want her %d queued jobs", st.ByState, len(alice))
	}
	if len(st.Recent) != 2 || st.Recent[0].ID != alice[2] || st.Recent[1].ID != alice[1] {
		t.Errorf("CallerStats(alice, 2).Recent = %+v, want her two newest jobs %v", st.Recent, alice[1:])
	}
	if st, err := s.CallerStats(ctx, "carol", 5); err != nil || st.ByState[schema.JobQueued] != 0 || len(st.Recent) != 0 {
		t.Errorf("CallerStats(carol) = %+v, %v; want no jobs", st, err)
	}
	if all := stats(t, s, 10); all.ByState[schema.JobQueued] != 6 || len(all.Recent) != 6 {
		t.Errorf("Stats() = %+v, want every caller's 6 jobs", all)
	}
}
