package aggregator_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// fakeFull is a worker of method "hold" with one slot, driven by hand: it
// holds the call whose params are "first" once that call asks for free
// slots (a reply may name one only then), refuses every other call that
// reaches it through the queue group as busy (naming its direct subject,
// as a worker speaking rule 10 does), and answers "direct" to whatever
// reaches it on its direct subject.
type fakeFull struct {
	nc      *nats.Conn
	direct  string
	held    chan *nats.Msg
	refused atomic.Int64
	viaDir  atomic.Int64
}

func newFakeFull(t *testing.T, nc *nats.Conn) *fakeFull {
	t.Helper()
	f := &fakeFull{nc: nc, direct: "toolbus.direct.w1", held: make(chan *nats.Msg, 1)}
	sub, err := nc.QueueSubscribe("toolbus.call.hold", "toolbus-workers", func(m *nats.Msg) {
		if env, err := schema.UnmarshalCall(m.Data); err == nil && string(env.Params) == `"first"` && m.Header.Get(schema.HeaderNameFree) != "" {
			f.held <- m
			return
		}
		f.refused.Add(1)
		nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{
			schema.HeaderProgress: []string{schema.ProgressBusy}, schema.HeaderDirect: []string{f.direct}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	dsub, err := nc.QueueSubscribe(f.direct+".>", "toolbus-workers", func(m *nats.Msg) {
		f.viaDir.Add(1)
		reply(m, schema.ReplyResult([]byte(`"direct"`)), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dsub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// reply answers m with r and the headers h.
func reply(m *nats.Msg, r *schema.ReplyEnvelope, h nats.Header) {
	data, err := schema.MarshalReply(r)
	if err != nil {
		panic(err)
	}
	m.RespondMsg(&nats.Msg{Subject: m.Reply, Data: data, Header: h})
}

// A call that a busy worker refused waits for a slot; the reply that frees
// one, naming the worker's direct subject, sends the call there at once.
// The fake refuses the call every time it comes through the queue group,
// so only the direct subject can answer it.
func TestFreedSlotTakesARefusedCall(t *testing.T) {
	ac, wc := setup(t)
	f := newFakeFull(t, wc)
	a := newAgg(t, ac)

	first := make(chan schema.Response, 1)
	go func() { first <- dispatchOne(a, call("1", "hold", `"first"`)) }()
	held := <-f.held
	refused := f.refused.Load() // the first call's, before it asked

	second := make(chan schema.Response, 1)
	go func() { second <- dispatchOne(a, call("2", "hold", `"second"`)) }()
	testwait.Eventually(t, func() bool { return f.refused.Load() > refused }, "the second call is refused as busy")

	reply(held, schema.ReplyResult([]byte(`"held"`)), nats.Header{
		schema.HeaderDirect: []string{f.direct}, schema.HeaderFree: []string{"1"}})
	if r := <-first; r.Error != nil || string(r.Result) != `"held"` {
		t.Fatalf("first call = %+v, want result \"held\"", r)
	}
	if r := <-second; r.Error != nil || string(r.Result) != `"direct"` {
		t.Fatalf("second call = %+v, %+v; want the result of the direct subject", r, r.Error)
	}
	if f.viaDir.Load() != 1 {
		t.Fatalf("%d calls reached the direct subject, want 1", f.viaDir.Load())
	}
}

// A reply may name only a direct subject of the cluster's prefix: any
// other subject is ignored, so a worker cannot make the ingress publish
// calls where it likes.
func TestFreedSlotMustBeADirectSubject(t *testing.T) {
	ac, wc := setup(t)
	a := newAgg(t, ac)
	var elsewhere atomic.Int64
	sub, err := wc.Subscribe("toolbus.jobs.>", func(*nats.Msg) { elsewhere.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var calls atomic.Int64
	qsub, err := wc.QueueSubscribe("toolbus.call.hold", "toolbus-workers", func(m *nats.Msg) {
		if calls.Add(1) == 1 {
			// Answers the first, claiming free slots somewhere else.
			reply(m, schema.ReplyResult([]byte(`1`)), nats.Header{
				schema.HeaderDirect: []string{"toolbus.jobs.cancel"}, schema.HeaderFree: []string{"5"}})
			return
		}
		reply(m, schema.ReplyResult([]byte(`2`)), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer qsub.Unsubscribe()
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"1", "2"} {
		r := dispatchOne(a, call(want, "hold", `{}`))
		if r.Error != nil || string(r.Result) != want {
			t.Fatalf("call %d = %+v, %+v; want result %s", i, r, r.Error, want)
		}
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("%d messages reached toolbus.jobs.>, want none", n)
	}
}

// A slot named free whose worker is gone answers no-responders: the call
// goes to the queue group instead, nothing of it is lost, and the slots
// that worker names are not believed any more (a worker whose NATS
// permissions refuse its direct subscription names them all the same).
func TestFreedSlotOfAGoneWorker(t *testing.T) {
	ac, wc := setup(t)
	a := newAgg(t, ac)
	var calls atomic.Int64
	qsub, err := wc.QueueSubscribe("toolbus.call.hold", "toolbus-workers", func(m *nats.Msg) {
		if calls.Add(1) == 1 {
			// A refusal first, so that the method's calls ask for
			// free slots from now on.
			wc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{
				schema.HeaderProgress: []string{schema.ProgressBusy}, schema.HeaderDirect: []string{"toolbus.direct.gone"}}})
			return
		}
		// Every answer names a free slot of a worker that never
		// subscribed to its direct subject.
		reply(m, schema.ReplyResult(json.RawMessage(`"queue"`)), nats.Header{
			schema.HeaderDirect: []string{"toolbus.direct.gone"}, schema.HeaderFree: []string{"1"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer qsub.Unsubscribe()
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	before := ac.Stats().OutMsgs
	for i := range 4 {
		r := dispatchOne(a, call("1", "hold", `{}`))
		if r.Error != nil || string(r.Result) != `"queue"` {
			t.Fatalf("call %d = %+v, %+v; want the queue group's result", i, r, r.Error)
		}
	}
	// One message per call to the queue group, one more for the first
	// call (refused, then published again), and one to the gone worker's
	// direct subject: the second call's, on the slot the first reply
	// named. After its no-responders, the slots named there are ignored.
	if n := ac.Stats().OutMsgs - before; n != 6 {
		t.Fatalf("the aggregator published %d messages for 4 calls, want 6 (one refusal, one direct attempt, then none)", n)
	}
}

// dispatchOne dispatches c alone and returns its answer.
func dispatchOne(a *aggregator.Aggregator, c schema.Call) schema.Response {
	var got schema.Response
	a.Dispatch(context.Background(), []schema.Call{c}, func(_ int, r schema.Response) { got = r })
	return got
}
