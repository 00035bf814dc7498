package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// A worker names its free slots (PROTOCOL.md, rule 10): its busy refusal
// carries its direct subject, the reply of a call that asked with
// Toolbus-Name-Free names the slot it frees, and a call sent to that
// subject is served like one from the queue group.
func TestWorkerNamesItsFreeSlots(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithConcurrency(1))
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	// A test that fails early lets the handler go, so that the runtime
	// shuts down.
	gone := make(chan struct{})
	t.Cleanup(func() { close(gone) })
	if err := c.rt.HandleFunc("hold", func(ctx context.Context, req *worker.Request) (any, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-gone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return string(req.Params), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("echo", func(ctx context.Context, req *worker.Request) (any, error) {
		return req.Params, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	inbox := c.caller.NewInbox()
	got := make(chan *nats.Msg, 16)
	sub, err := c.caller.ChanSubscribe(inbox+".*", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	send := func(subject, token, params string) {
		t.Helper()
		msg := callMsg(t, "hold", params, time.Now().Add(time.Minute))
		msg.Subject = subject
		msg.Reply = inbox + "." + token
		msg.Header.Set(schema.HeaderHeartbeat, "60000")
		msg.Header.Set(schema.HeaderNameFree, "1")
		if err := c.caller.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	// next returns the next message for token, skipping acks and beats.
	next := func(token string) *nats.Msg {
		t.Helper()
		for m := range got {
			if p := m.Header.Get(schema.HeaderProgress); p == schema.ProgressAck || p == schema.ProgressBeat {
				continue
			}
			if !strings.HasSuffix(m.Subject, "."+token) {
				t.Fatalf("a message for %s while waiting for %s", m.Subject, token)
			}
			return m
		}
		return nil
	}

	send("toolbus.call.hold", "a", `"a"`)
	<-started
	send("toolbus.call.hold", "b", `"b"`)
	busy := next("b")
	if busy.Header.Get(schema.HeaderProgress) != schema.ProgressBusy {
		t.Fatalf("second call answered %v, want a busy refusal", busy.Header)
	}
	direct := busy.Header.Get(schema.HeaderDirect)
	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	if !subjects.IsDirect(direct) {
		t.Fatalf("busy refusal names direct subject %q, want one of toolbus.direct.<id>", direct)
	}

	release <- struct{}{}
	r := next("a")
	if r.Header.Get(schema.HeaderDirect) != direct || r.Header.Get(schema.HeaderFree) != "1" {
		t.Fatalf("reply headers %v, want %s %s and %s 1", r.Header, schema.HeaderDirect, direct, schema.HeaderFree)
	}
	if env, err := bus.ReadReply(r); err != nil || string(env.Result) != `"\"a\""` {
		t.Fatalf("reply = %v, %v", env, err)
	}

	// The slot is free: a call sent to the direct subject runs there.
	send(direct+".hold", "c", `"c"`)
	<-started
	release <- struct{}{}
	if env, err := bus.ReadReply(next("c")); err != nil || string(env.Result) != `"\"c\""` {
		t.Fatalf("direct call = %v, %v; want its result", env, err)
	}

	// A method the worker does not serve, sent to its direct subject,
	// reaches nobody: NATS answers no-responders, and an aggregator
	// then sends the call to the queue group.
	send(direct+".nosuch", "d", `{}`)
	if _, err := bus.ReadReply(next("d")); !errors.Is(err, bus.ErrNoResponders) {
		t.Fatalf("direct call of an unknown method = %v; want no responders", err)
	}
}

// A call that does not ask for free slots gets a plain reply: the headers
// cost nothing when there is no load.
func TestWorkerWithoutLoadNamesNoSlots(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("echo", func(ctx context.Context, req *worker.Request) (any, error) {
		return req.Params, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	msg := callMsg(t, "echo", `1`, time.Now().Add(time.Minute))
	msg.Header.Set(schema.HeaderHeartbeat, "60000")
	resp, err := c.caller.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(schema.HeaderDirect) != "" || resp.Header.Get(schema.HeaderFree) != "" {
		t.Fatalf("reply headers %v, want no free slots named", resp.Header)
	}
}
