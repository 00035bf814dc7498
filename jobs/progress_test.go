package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// maxProgressLag bounds how long after its tool reported it a job's record
// shows the newest progress, with the default interval: the record follows
// within one interval (100ms) of the report reaching the runner, and this
// leaves room for a loaded machine. A runner that wrote progress once a
// second, as it once did, lags by about that second.
const maxProgressLag = 750 * time.Millisecond

// TestProgressFollowsTheTool checks that a job's record shows the last
// progress its tool reported while the tool still runs, soon after the
// report, with the runner's default interval. The second report comes
// after the first was written, as a tool's reports come over its run,
// where a runner that waits out its interval before the next write lags.
func TestProgressFollowsTheTool(t *testing.T) {
	if jobs.DefaultProgressInterval > worker.ProgressInterval {
		t.Errorf("DefaultProgressInterval = %v, want at most worker.ProgressInterval (%v): the record would lag the worker's reports",
			jobs.DefaultProgressInterval, worker.ProgressInterval)
	}
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	next := make(chan struct{})
	reported := make(chan time.Time, 1)
	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("build", func(ctx context.Context, req *worker.Request) (any, error) {
			worker.Progress(ctx, 20, "compiling")
			select {
			case <-next:
			case <-release:
				return nil, errors.New("released before the second report")
			}
			worker.Progress(ctx, 42, "linking")
			reported <- time.Now()
			<-release
			return "built", nil
		})
	}), jobs.WithProgressInterval(jobs.DefaultProgressInterval))
	// Registered after the runner's shutdown, so it runs first: a failed
	// test still lets the tool end.
	releaseTool := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseTool)

	id := submit(t, s, "build", `{}`)
	waitFor(t, s, id, "progress 20", func(r *schema.JobRecord) bool { return r.Progress != nil && r.Progress.Percent == 20 })
	close(next)
	var at time.Time
	select {
	case at = <-reported:
	case <-time.After(testwait.Limit):
		t.Fatalf("job %s: the tool did not report 42%% within %v", id, testwait.Limit)
	}
	r := waitFor(t, s, id, "progress 42", func(r *schema.JobRecord) bool { return r.Progress != nil && r.Progress.Percent == 42 })
	lag := time.Since(at)
	t.Logf("the record showed 42%% %v after the report", lag)
	if r.State != schema.JobRunning || r.Progress.Message != "linking" {
		t.Errorf("record = %s, %+v; want running, 42%% linking while the tool waits", r.State, r.Progress)
	}
	if lag > maxProgressLag {
		t.Errorf("the record showed 42%% %v after the tool reported it, want at most %v", lag, maxProgressLag)
	}
	releaseTool()
	waitState(t, s, id, schema.JobSucceeded)
}

// TestProgressWritesAreBounded checks that a tool reporting in a burst
// does not write the job's record once per report: the first report is
// written at once and the newest when the interval ends.
func TestProgressWritesAreBounded(t *testing.T) {
	const reports = 1000
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.KeyValue(ctx, "toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "job.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("burst", func(ctx context.Context, req *worker.Request) (any, error) {
			for i := 1; i <= reports; i++ {
				worker.Progress(ctx, float64(i)/10, fmt.Sprintf("report %d", i))
			}
			<-release
			return "done", nil
		})
	}), jobs.WithProgressInterval(jobs.DefaultProgressInterval))
	releaseTool := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseTool)
	submit(t, s, "burst", `{}`)

	last := fmt.Sprintf("report %d", reports)
	writes := 0
	timeout := time.After(testwait.Limit)
	for done := false; !done; {
		select {
		case entry := <-w.Updates():
			if entry == nil {
				continue
			}
			var rec struct {
				State    schema.JobState     `json:"state"`
				Progress *schema.JobProgress `json:"progress"`
			}
			if err := json.Unmarshal(entry.Value(), &rec); err != nil || rec.State != schema.JobRunning || rec.Progress == nil {
				continue
			}
			writes++
			done = rec.Progress.Message == last
		case <-timeout:
			t.Fatalf("the record did not show %q within %v (%d progress writes seen)", last, testwait.Limit, writes)
		}
	}
	t.Logf("%d reports in a burst, %d writes of the record", reports, writes)
	// Two writes when the burst fits in one interval; one more when it
	// straddles the end of one.
	if writes > 3 {
		t.Errorf("%d reports in a burst wrote the record %d times, want at most 3", reports, writes)
	}
	releaseTool()
}
