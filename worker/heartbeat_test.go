package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// watch sends msg asking for heartbeats every 20ms and returns the
// subscription on which its progress messages and reply arrive.
func (c *cluster) watch(t *testing.T, msg *nats.Msg) *nats.Subscription {
	t.Helper()
	return watchFrom(t, c.caller, msg, "20")
}

// watchFrom sends msg from nc with a reply subject of nc's, asking for a
// heartbeat every heartbeat milliseconds unless heartbeat is empty, and
// returns the subscription on which its progress messages and reply
// arrive.
func watchFrom(t *testing.T, nc *nats.Conn, msg *nats.Msg, heartbeat string) *nats.Subscription {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	msg.Reply = inbox
	if heartbeat != "" {
		msg.Header.Set(schema.HeaderHeartbeat, heartbeat)
	}
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("NextMsg: %v", err)
	}
	return m
}

// reply returns the next message of sub that is not a progress message:
// the call's answer, after the heartbeats sent before its handler returned.
func reply(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	for {
		if m := next(t, sub); m.Header.Get(schema.HeaderProgress) == "" {
			return m
		}
	}
}

func TestHeartbeats(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	release := make(chan struct{})
	if err := c.rt.HandleFunc("slow", func(ctx context.Context, _ *worker.Request) (any, error) {
		<-release
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	sub := c.watch(t, callMsg(t, "slow", "", time.Time{}))
	if got := next(t, sub).Header.Get(schema.HeaderProgress); got != schema.ProgressAck {
		t.Fatalf("first message %s = %q, want %q", schema.HeaderProgress, got, schema.ProgressAck)
	}
	for i := range 3 {
		if got := next(t, sub).Header.Get(schema.HeaderProgress); got != schema.ProgressBeat {
			t.Fatalf("message %d %s = %q, want %q", i+2, schema.HeaderProgress, got, schema.ProgressBeat)
		}
	}
	close(release)
	r, err := bus.ReadReply(reply(t, sub))
	if err != nil || string(r.Result) != `"done"` {
		t.Fatalf("reply = %v, %v, want \"done\"", r, err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("message after the reply: %v", m.Header)
	}
}

func TestBusyWorkerRefusesWhoUnderstands(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	if err := c.rt.HandleFunc("one", func(ctx context.Context, _ *worker.Request) (any, error) {
		started <- struct{}{}
		<-release
		return 1, nil
	}, worker.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	first := c.watch(t, callMsg(t, "one", "", time.Time{}))
	<-started
	if got := next(t, first).Header.Get(schema.HeaderProgress); got != schema.ProgressAck {
		t.Fatalf("first call %s = %q, want %q", schema.HeaderProgress, got, schema.ProgressAck)
	}
	second := c.watch(t, callMsg(t, "one", "", time.Time{}))
	if got := next(t, second).Header.Get(schema.HeaderProgress); got != schema.ProgressBusy {
		t.Fatalf("second call %s = %q, want %q", schema.HeaderProgress, got, schema.ProgressBusy)
	}
	// A caller that does not speak the protocol waits for a slot, as
	// before.
	old := make(chan error, 1)
	oldMsg := callMsg(t, "one", "", time.Time{})
	go func() {
		r, err := c.send(oldMsg)
		if err == nil && r.Err() != nil {
			err = r.Err()
		}
		old <- err
	}()
	close(release)
	if err := <-old; err != nil {
		t.Errorf("call without %s = %v, want a result", schema.HeaderHeartbeat, err)
	}
}

// TestProgressReports checks that worker.Progress in a call over the bus
// sends progress reports to an aggregator that asked for heartbeats, the
// newest of a burst held back rather than lost, and nothing to one that
// did not ask.
func TestProgressReports(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	step := make(chan struct{})
	if err := c.rt.HandleFunc("work", func(ctx context.Context, _ *worker.Request) (any, error) {
		worker.Progress(ctx, 10, "started")
		<-step
		for i := range 50 {
			worker.Progress(ctx, float64(11+i), "")
		}
		worker.Progress(ctx, 250, "last")
		<-step
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	sub := watchFrom(t, c.caller, callMsg(t, "work", "", time.Time{}), "60000")
	nextReport := func() schema.JobProgress {
		t.Helper()
		for {
			m := next(t, sub)
			switch m.Header.Get(schema.HeaderProgress) {
			case schema.ProgressReport:
				p, err := schema.UnmarshalProgress(m.Data)
				if err != nil {
					t.Fatalf("report body %q: %v", m.Data, err)
				}
				return p
			case "":
				t.Fatalf("reply %q before the report", m.Data)
			}
		}
	}
	if got := nextReport(); got != (schema.JobProgress{Percent: 10, Message: "started"}) {
		t.Fatalf("first report = %+v, want {10 started}", got)
	}
	step <- struct{}{}
	// The burst leaves as at most a few reports, the last being the
	// newest, clamped to 100.
	var got schema.JobProgress
	for n := 0; got.Message != "last"; n++ {
		if n > 10 {
			t.Fatalf("more than 10 reports for a burst of 51 within %v", worker.ProgressInterval)
		}
		got = nextReport()
	}
	if got.Percent != 100 {
		t.Errorf("last report = %+v, want percent 100", got)
	}
	step <- struct{}{}
	if m := reply(t, sub); string(m.Data) == "" {
		t.Fatal("empty reply")
	}

	// A caller that asked for no heartbeats gets the reply alone.
	sub = watchFrom(t, c.caller, callMsg(t, "work", "", time.Time{}), "")
	step <- struct{}{}
	step <- struct{}{}
	if m := next(t, sub); m.Header.Get(schema.HeaderProgress) != "" {
		t.Fatalf("message %q with %s %q to a caller that asked for none", m.Data, schema.HeaderProgress, m.Header.Get(schema.HeaderProgress))
	}
}
