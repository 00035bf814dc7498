package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestStatusCountsCalls(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithAnnounce(bus.MaxAnnounceInterval))
	if err := c.rt.HandleFunc("s.*", func(_ context.Context, req *worker.Request) (any, error) {
		if req.Method == "s.fail" {
			return nil, &schema.Error{Code: 2001, Message: "insufficient funds"}
		}
		return 1, nil
	}, worker.Concurrency(7)); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("idle", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	feed, err := bus.NewAnnouncements(c.caller, subjects)
	if err != nil {
		t.Fatal(err)
	}
	announced := make(chan string, 8)
	stop, err := feed.Watch(func(_ string, data []byte) {
		if a, _, err := schema.ParseAnnouncement(data); err == nil {
			select {
			case announced <- a.Worker:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c.start(t)

	c.result(t, "s.a", "")
	c.result(t, "s.b", "")
	if _, err := c.send(tracedMsg(t, "s.fail")); err != nil {
		t.Fatal(err)
	}

	st := c.rt.Status()
	if st.ID == "" || !st.Ready || st.NotReady != "" || st.Started.IsZero() || st.WindowSeconds <= 0 {
		t.Errorf("Status() = %+v, want an id, ready, a start time and a window", st)
	}
	select {
	case id := <-announced:
		if id != st.ID {
			t.Errorf("announced worker id %q, want the status id %q", id, st.ID)
		}
	case <-time.After(10 * time.Second):
		t.Error("no announcement within 10s")
	}
	if len(st.Methods) != 2 || st.Methods[0].Method != "idle" || st.Methods[1].Method != "s.*" {
		t.Fatalf("Status().Methods = %+v, want idle and s.*", st.Methods)
	}
	if m := st.Methods[0]; m.Total != 0 || m.Concurrency != worker.DefaultConcurrency {
		t.Errorf("idle = %+v, want no calls and the default concurrency", m)
	}
	m := st.Methods[1]
	if m.Calls != 3 || m.Errors != 1 || m.Total != 3 || m.TotalErrors != 1 || m.InFlight != 0 || m.Concurrency != 7 {
		t.Errorf("s.* = %+v, want 3 calls, 1 error, none in flight, concurrency 7", m)
	}
	if m.Rate <= 0 || m.P99Ms <= 0 || m.ErrorRate < 0.33 || m.ErrorRate > 0.34 {
		t.Errorf("s.* = %+v, want a rate, a p99 and an error rate of 1/3", m)
	}
	if len(st.RecentErrors) != 1 {
		t.Fatalf("RecentErrors = %+v, want one", st.RecentErrors)
	}
	e := st.RecentErrors[0]
	if e.Method != "s.fail" || e.Code != 2001 || e.ID != "1" || e.TraceID != parentTraceID || e.Time.IsZero() {
		t.Errorf("RecentErrors[0] = %+v, want s.fail 2001 id 1 in trace %s", e, parentTraceID)
	}

	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "host", "started", "ready", "methods", "recent_errors", "window_seconds"} {
		if _, ok := decoded[k]; !ok && !(k == "host" && st.Host == "") {
			t.Errorf("Status JSON %s has no %q", b, k)
		}
	}
}

func TestReady(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	release := make(chan struct{})
	started := make(chan struct{})
	if err := c.rt.HandleFunc("slow", func(context.Context, *worker.Request) (any, error) {
		close(started)
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.Ready(); !errors.Is(err, worker.ErrNotStarted) {
		t.Errorf("Ready() before Start = %v, want %v", err, worker.ErrNotStarted)
	}
	c.start(t)
	if err := c.rt.Ready(); err != nil {
		t.Errorf("Ready() after Start = %v, want nil", err)
	}

	answered := make(chan struct{})
	go func() {
		defer close(answered)
		c.result(t, "slow", "")
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- c.rt.Shutdown(context.Background()) }()
	toolbustest.Eventually(t, func() bool { return errors.Is(c.rt.Ready(), worker.ErrDraining) }, "Ready() reports the runtime draining")
	if st := c.rt.Status(); st.Ready || st.NotReady == "" {
		t.Errorf("Status() while draining: ready %v %q, want not ready with a reason", st.Ready, st.NotReady)
	}
	close(release)
	<-answered
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := c.rt.Ready(); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Ready() after Shutdown = %v, want %v", err, worker.ErrClosed)
	}
}

func TestReadyDisconnected(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := worker.New(nc, worker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("x", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := rt.Ready(); !errors.Is(err, worker.ErrDisconnected) {
		t.Errorf("Ready() on a closed connection = %v, want %v", err, worker.ErrDisconnected)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestStatusWithoutNode: a worker built with this package alone answers
// `toolbus status` once started, and leaves it when it shuts down.
func TestStatusWithoutNode(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithVersion("1.2.3"))
	if err := c.rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil }); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	gather := func() []bus.Status {
		sts, err := bus.GatherStatus(context.Background(), c.caller, subjects, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return sts
	}
	sts := gather()
	if len(sts) != 1 || sts[0].Kind != bus.KindWorker || sts[0].ID != c.rt.Status().ID || sts[0].Version != "1.2.3" {
		t.Fatalf("toolbus status finds %+v, want this worker, version 1.2.3", sts)
	}
	if err := c.rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sts := gather(); len(sts) != 0 {
		t.Errorf("after Shutdown toolbus status finds %+v, want nobody", sts)
	}
}
