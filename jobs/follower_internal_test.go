package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// hangBound bounds a wait for something the test caused; it is a bound on
// a hang, not a timing goal.
const hangBound = 30 * time.Second

// spyKV hands every watch it creates to watches.
type spyKV struct {
	jetstream.KeyValue
	watches chan jetstream.KeyWatcher
}

func (s spyKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := s.KeyValue.Watch(ctx, keys, opts...)
	if err == nil {
		s.watches <- w
	}
	return w, err
}

// testService returns a service on a server of its own, and its JetStream.
func testService(t *testing.T) (*Service, jetstream.JetStream) {
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(js, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

// recordConsumers returns the consumers of the bucket of records, read
// from the server.
func recordConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.AllowDirect {
		t.Fatal("the bucket of records does not allow direct gets, which its reads need")
	}
	return info.State.Consumers
}

// newJob writes the record of a queued job and returns its id.
func newJob(t *testing.T, s *Service) string {
	t.Helper()
	id := s.ids.next(time.Now())
	rec := &stored{JobRecord: schema.JobRecord{ID: id, Method: "echo", State: schema.JobQueued, MaxAttempts: 1}}
	if _, err := s.st.create(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	return id
}

// setProgress writes percent as the progress of running job id, or
// finishes it at 100.
func setProgress(t *testing.T, s *Service, id string, percent float64) {
	t.Helper()
	_, err := s.st.update(t.Context(), id, func(r *stored) error {
		if percent >= 100 {
			r.finish(schema.JobSucceeded, []byte(`"done"`), nil, time.Now())
			return nil
		}
		r.State, r.Progress = schema.JobRunning, &schema.JobProgress{Percent: percent}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func percent(r *stored) float64 {
	if r.Progress == nil {
		return -1
	}
	return r.Progress.Percent
}

// next receives the follower's next record, failing the test at a hang.
func next(t *testing.T, f *follower) (*stored, bool) {
	t.Helper()
	select {
	case r, ok := <-f.records():
		return r, ok
	case <-time.After(hangBound):
		t.Fatalf("follower of %s got nothing in %v", f.id, hangBound)
		return nil, false
	}
}

// TestFollowersShareOneWatch checks the hub's fan-out: a thousand
// followers of several jobs hold one consumer of the bucket between them;
// a follower that reads keeps up with every update while the others read
// nothing, and each of those finds only the newest record, the final one,
// and then the end of its channel.
func TestFollowersShareOneWatch(t *testing.T) {
	s, js := testService(t)
	ctx := t.Context()
	if n := recordConsumers(t, js); n != 0 {
		t.Fatalf("consumers of the records before any follower = %d, want 0", n)
	}
	const jobs, perJob = 4, 250
	var ids []string
	for range jobs {
		ids = append(ids, newJob(t, s))
	}
	slow := map[string][]*follower{}
	for _, id := range ids {
		for range perJob {
			f, err := s.hub.follow(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.stop)
			slow[id] = append(slow[id], f)
		}
	}
	// The watch comes up on a goroutine of its own.
	testwait.Eventually(t, func() bool { return recordConsumers(t, js) == 1 },
		"the followers share one consumer of the records")
	// The watch hands the updates over in the order they were written,
	// so once the follower of the job written last in a round has its
	// update, every follower of the jobs written before it has been
	// offered the round's. That job has no other follower: the followers
	// of one job are offered an update one after another, and one that
	// has it says nothing of the others.
	last := newJob(t, s)
	fast, err := s.hub.follow(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fast.stop)
	if r, _ := next(t, fast); r.State != schema.JobQueued {
		t.Fatalf("first record = %s, want queued", r.State)
	}
	for _, p := range []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100} {
		for _, id := range append(ids[:len(ids):len(ids)], last) {
			setProgress(t, s, id, p)
		}
		r, ok := next(t, fast)
		if !ok {
			t.Fatalf("the fast follower's channel closed at %v%%: %v", p, fast.err())
		}
		if p == 100 {
			if r.State != schema.JobSucceeded {
				t.Fatalf("record after the last update = %s, want succeeded", r.State)
			}
			continue
		}
		if got := percent(r); got != p {
			t.Fatalf("record after the update to %v%% = %v%%, want it", p, got)
		}
	}
	if _, ok := next(t, fast); ok {
		t.Error("the fast follower's channel is open after the final record")
	}
	for id, fs := range slow {
		for i, f := range fs {
			r, ok := next(t, f)
			if !ok || r.State != schema.JobSucceeded {
				t.Fatalf("follower %d of %s: first record read late = %v (open %v), want the final one", i, id, r, ok)
			}
			if r, ok := next(t, f); ok {
				t.Fatalf("follower %d of %s: a second record %s after the final one", i, id, r.State)
			}
			if err := f.err(); err != nil {
				t.Fatalf("follower %d of %s ended with %v, want nil after the final record", i, id, err)
			}
		}
	}
	if n := recordConsumers(t, js); n != 1 {
		t.Errorf("consumers of the records after the updates = %d, want 1", n)
	}
}

// TestFollowerReadsAgainAfterTheWatchEnds checks that a watch that ends is
// made again and that every follower's record is then read again: a job
// that ends while no watch is up reaches its followers all the same.
func TestFollowerReadsAgainAfterTheWatchEnds(t *testing.T) {
	s, _ := testService(t)
	ctx := t.Context()
	spy := spyKV{KeyValue: s.st.kv, watches: make(chan jetstream.KeyWatcher, 4)}
	s.st.kv = spy
	waiting, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.hub.wait = func(ctx context.Context, _ time.Duration) bool {
		once.Do(func() { close(waiting) })
		select {
		case <-resume:
			return true
		case <-ctx.Done():
			return false
		}
	}
	id := newJob(t, s)
	f, err := s.hub.follow(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stop)
	if r, _ := next(t, f); r.State != schema.JobQueued {
		t.Fatalf("first record = %s, want queued", r.State)
	}
	var w jetstream.KeyWatcher
	select {
	case w = <-spy.watches:
	case <-time.After(hangBound):
		t.Fatal("no watch of the records was made")
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(hangBound):
		t.Fatal("the hub did not notice that its watch ended")
	}
	setProgress(t, s, id, 100) // while no watch is up
	close(resume)
	r, ok := next(t, f)
	if !ok || r.State != schema.JobSucceeded {
		t.Fatalf("record after the watch came back = %v (open %v, %v), want the final one", r, ok, f.err())
	}
	select {
	case <-spy.watches:
	default:
		t.Error("the hub read the record again but made no new watch")
	}
}

// TestFollowerOfAGoneRecord checks that a follower ends, with errGone,
// when its job's record is deleted, and that a missing job cannot be
// followed.
func TestFollowerOfAGoneRecord(t *testing.T) {
	s, _ := testService(t)
	ctx := t.Context()
	if _, err := s.hub.follow(ctx, "06h34p7hhvaq8r3cv44sm5bzgz"); !errors.Is(err, errNotFound) {
		t.Fatalf("follow of a missing job = %v, want errNotFound", err)
	}
	id := newJob(t, s)
	f, err := s.hub.follow(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stop)
	next(t, f)
	if err := s.st.kv.Delete(ctx, jobKey(id)); err != nil {
		t.Fatal(err)
	}
	if r, ok := next(t, f); ok {
		t.Fatalf("record after a delete = %v, want the channel closed", r)
	}
	if err := f.err(); !errors.Is(err, errGone) {
		t.Errorf("follower ended with %v, want errGone", err)
	}
}
