package aggregator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// sent is a message the table published.
type sent struct {
	subject, reply string
	nameFree       bool
	ackDelay       string // the Toolbus-Ack-Delay header; "" when absent
}

// fakeWire is a [wire] that records what the table sends; while away,
// the bus is disconnected.
type fakeWire struct {
	sent     []sent
	canceled []string
	away     bool
}

func (w *fakeWire) publish(m *nats.Msg, method string) *schema.Error {
	if w.away {
		return schema.NewError(schema.CodeUnavailable, "unavailable: not connected to NATS",
			map[string]any{"retryable": true, "reason": schema.ReasonBusDisconnected, "method": method})
	}
	w.sent = append(w.sent, sent{subject: m.Subject, reply: m.Reply, nameFree: m.Header.Get(schema.HeaderNameFree) != "",
		ackDelay: m.Header.Get(schema.HeaderAckDelay)})
	return nil
}

func (w *fakeWire) cancel(callID string) { w.canceled = append(w.canceled, callID) }

// last returns the message sent last, and fails t when there is none.
func (w *fakeWire) last(t *testing.T) sent {
	t.Helper()
	if len(w.sent) == 0 {
		t.Fatal("nothing was published")
	}
	return w.sent[len(w.sent)-1]
}

// harness drives a table without NATS: messages are made by hand, and
// time passes only when the test moves the clock.
type harness struct {
	t        *testing.T
	tb       *table
	clk      *clock
	wire     *fakeWire
	rec      *records
	answered map[*call]int
	order    []*call
	armed    []time.Duration
	// stopped counts, for each local call, the calls of the stop it was
	// started with ([harness.local]).
	stopped map[*call]int
}

// testPolicy is the liveness of the harness's tables: a heartbeat of
// 100ms, 3 misses.
var testPolicy = policy{liveness: true, silence: 300 * time.Millisecond, ackTimeout: time.Second,
	maxAttempts: 2, busyWait: time.Second, recheck: 50 * time.Millisecond}

func newHarness(t *testing.T, p policy) *harness {
	t.Helper()
	h := &harness{t: t, clk: newClock(), wire: &fakeWire{}, rec: &records{}, answered: map[*call]int{},
		stopped: map[*call]int{}}
	h.tb = newTable("toolbus.jobs.reply", testSubjects(t), p, h.wire, slog.New(h.rec), func(cl *call) {
		h.answered[cl]++
		h.order = append(h.order, cl)
	})
	h.tb.now = h.clk.now
	h.tb.strays.now = h.clk.now
	h.tb.arm = func(d time.Duration) { h.armed = append(h.armed, d) }
	return h
}

// callOpt sets up a call of the harness.
type callOpt func(cl *call)

func retrySafe(cl *call) { cl.safe = true }

func withTimeout(d time.Duration) callOpt { return func(cl *call) { cl.timeout = d } }

func withProgress(f func(float64, string)) callOpt {
	return func(cl *call) { cl.c.Progress = f }
}

// newCall returns a call of method, admitted and not yet started, in a
// batch of its own under ctx.
func (h *harness) newCall(ctx context.Context, method string, opts ...callOpt) *call {
	b := &batch{ctx: ctx, start: h.clk.now(), calls: make([]call, 1)}
	cl := &b.calls[0]
	*cl = call{c: &schema.Call{Request: schema.Request{Method: method, ID: []byte(`1`)}},
		b: b, method: method, timeout: 5 * time.Second, index: -1, callID: "call-" + method}
	for _, o := range opts {
		o(cl)
	}
	cl.deadline = momentOf(h.clk.now().Add(cl.timeout))
	return cl
}

// start starts a call of method and returns it published.
func (h *harness) start(method string, opts ...callOpt) *call {
	h.t.Helper()
	cl := h.newCall(context.Background(), method, opts...)
	h.tb.start(cl, "toolbus.call."+method, nil)
	return cl
}

// local enters a call of method in the table as run by a
// [LocalStarter], started with a stop that [harness.stopped] counts, and
// returns it there.
func (h *harness) local(method string, opts ...callOpt) *call {
	h.t.Helper()
	cl := h.newCall(context.Background(), method, opts...)
	if !h.tb.enterLocal(cl) {
		h.t.Fatal("enterLocal of a call within its deadline = false, want it entered")
	}
	h.tb.localStarted(cl, func() { h.stopped[cl]++ })
	return cl
}

// msg delivers a message to cl's reply subject with headers hv (name,
// value pairs) and body data.
func (h *harness) msg(cl *call, data string, hv ...string) {
	h.to(h.subject(cl), data, hv...)
}

// subject is cl's reply subject.
func (h *harness) subject(cl *call) string { return h.tb.prefix + cl.token }

// to delivers a message to subject.
func (h *harness) to(subject, data string, hv ...string) {
	h.t.Helper()
	m := &nats.Msg{Subject: subject, Data: []byte(data), Header: nats.Header{}}
	for i := 0; i+1 < len(hv); i += 2 {
		m.Header.Set(hv[i], hv[i+1])
	}
	h.tb.deliver(m)
}

func (h *harness) ack(cl *call)  { h.msg(cl, "", schema.HeaderProgress, schema.ProgressAck) }
func (h *harness) beat(cl *call) { h.msg(cl, "", schema.HeaderProgress, schema.ProgressBeat) }
func (h *harness) busy(cl *call, direct string) {
	if direct == "" {
		h.msg(cl, "", schema.HeaderProgress, schema.ProgressBusy)
		return
	}
	h.msg(cl, "", schema.HeaderProgress, schema.ProgressBusy, schema.HeaderDirect, direct)
}

// reply answers cl with result r and headers hv.
func (h *harness) reply(cl *call, r string, hv ...string) {
	h.t.Helper()
	h.msg(cl, string(replyBytes(h.t, r)), hv...)
}

// noResponders delivers NATS's no-responders message to cl's reply
// subject.
func (h *harness) noResponders(cl *call) {
	h.t.Helper()
	h.tb.deliver(&nats.Msg{Subject: h.subject(cl), Header: nats.Header{"Status": []string{"503"}}})
}

func replyBytes(t *testing.T, r string) []byte {
	t.Helper()
	data, err := schema.MarshalReply(schema.ReplyResult([]byte(r)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// advance moves the clock by d and runs the timer, as its goroutine
// would.
func (h *harness) advance(d time.Duration) {
	h.clk.advance(d)
	h.tb.tick()
}

// answer returns cl's answer; it fails t unless cl was answered exactly
// once.
func (h *harness) answer(cl *call) ([]byte, *schema.Error) {
	h.t.Helper()
	if n := h.answered[cl]; n != 1 {
		h.t.Fatalf("call answered %d times, want once", n)
	}
	return cl.result, cl.err
}

// open fails t when cl was answered.
func (h *harness) open(cl *call) {
	h.t.Helper()
	if n := h.answered[cl]; n != 0 {
		h.t.Fatalf("call answered (%v, %v), want it still open in state %v", string(cl.result), cl.err, cl.state)
	}
}

// empty fails t unless the table holds no call and no timer.
func (h *harness) empty() {
	h.t.Helper()
	if calls, timed := h.tb.size(); calls != 0 || timed != 0 {
		h.t.Fatalf("table holds %d calls and %d timers, want none", calls, timed)
	}
}
