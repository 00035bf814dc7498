package worker_test

import (
	"context"
	"sync"
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

// TestAckDelay checks what a call that asks for heartbeats gets before its
// reply when its aggregator allows the ack to be held back
// (Toolbus-Ack-Delay, rule 8): nothing for a call answered within the
// delay, otherwise exactly one ack, before anything else. No case depends
// on how fast the machine is: a delay or an interval the test must not
// wait for is a minute long, and the handler of a call that must be
// acknowledged blocks until the test has seen what it waits for.
func TestAckDelay(t *testing.T) {
	const minute = "60000"
	tests := []struct {
		name string
		// heartbeat and ackDelay are the headers' values; ackDelay is
		// not sent when empty.
		heartbeat, ackDelay string
		// quick handlers answer at once; the others block until the
		// test has read want.
		quick bool
		// report makes the handler report progress before it blocks.
		report bool
		// want are the progress messages that come before the reply
		// (for a quick handler) or while the handler blocks.
		want []string
	}{
		{name: "a call answered within the delay sends no ack", heartbeat: minute, ackDelay: minute, quick: true},
		{name: "a call that outlasts the delay sends one ack, then beats", heartbeat: "20", ackDelay: "10",
			want: []string{schema.ProgressAck, schema.ProgressBeat, schema.ProgressBeat, schema.ProgressBeat}},
		{name: "a report before the ack is due comes after an ack", heartbeat: minute, ackDelay: minute, report: true,
			want: []string{schema.ProgressAck, schema.ProgressReport}},
		{name: "without the header the ack comes at once", heartbeat: minute,
			want: []string{schema.ProgressAck}},
		{name: "a delay of zero asks for the ack at once", heartbeat: minute, ackDelay: "0",
			want: []string{schema.ProgressAck}},
		{name: "a negative delay is ignored", heartbeat: minute, ackDelay: "-20",
			want: []string{schema.ProgressAck}},
		{name: "a delay that is not a number is ignored", heartbeat: minute, ackDelay: "20ms",
			want: []string{schema.ProgressAck}},
		// Held back ten minutes, the ack would come long after the
		// first beat was due, and after next gives up.
		{name: "a delay longer than the interval is cut to it", heartbeat: "20", ackDelay: "600000",
			want: []string{schema.ProgressAck, schema.ProgressBeat}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, bus.EmbeddedConfig{})
			release := make(chan struct{})
			// Registered after the runtime's shutdown, so run before it:
			// a test that failed early does not leave the handler
			// blocking the shutdown.
			free := sync.OnceFunc(func() { close(release) })
			t.Cleanup(free)
			if err := c.rt.HandleFunc("m", func(ctx context.Context, _ *worker.Request) (any, error) {
				if tc.report {
					worker.Progress(ctx, 10, "started")
				}
				if !tc.quick {
					<-release
				}
				return "done", nil
			}); err != nil {
				t.Fatal(err)
			}
			c.start(t)
			msg := callMsg(t, "m", "", time.Time{})
			if tc.ackDelay != "" {
				msg.Header.Set(schema.HeaderAckDelay, tc.ackDelay)
			}
			sub := watchFrom(t, c.caller, msg, tc.heartbeat)
			var got []string
			for len(got) < len(tc.want) {
				m := next(t, sub)
				kind := m.Header.Get(schema.HeaderProgress)
				if kind == "" {
					t.Fatalf("reply after progress messages %q, want %q first", got, tc.want)
				}
				got = append(got, kind)
				if kind != tc.want[len(got)-1] {
					t.Fatalf("progress messages %q, want %q", got, tc.want)
				}
				if kind == schema.ProgressReport {
					if p, err := schema.UnmarshalProgress(m.Data); err != nil || p != (schema.JobProgress{Percent: 10, Message: "started"}) {
						t.Fatalf("report %q = %+v, %v, want {10 started}", m.Data, p, err)
					}
				}
			}
			free()
			// Only beats may come between the messages read and the
			// reply, and none for a quick call: the one ack, if any, has
			// come.
			for {
				m := next(t, sub)
				kind := m.Header.Get(schema.HeaderProgress)
				if kind == "" {
					r, err := bus.ReadReply(m)
					if err != nil || string(r.Result) != `"done"` {
						t.Fatalf("reply = %v, %v, want \"done\"", r, err)
					}
					break
				}
				if kind != schema.ProgressBeat || tc.quick {
					t.Fatalf("progress message %q after %q, want only beats before the reply", kind, got)
				}
			}
		})
	}
}
