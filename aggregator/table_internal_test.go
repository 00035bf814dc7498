package aggregator

import (
	"context"
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// setups put a call in each state the table holds, on the harness's
// clock, and return it there.
var setups = []struct {
	name  string
	state state
	make  func(h *harness) *call
}{
	{"queued", queued, func(h *harness) *call {
		cl := h.newCall(context.Background(), "m")
		h.tb.enqueue(cl)
		return cl
	}},
	{"published", published, func(h *harness) *call { return h.start("m") }},
	{"running", running, func(h *harness) *call {
		cl := h.start("m")
		h.ack(cl)
		return cl
	}},
	{"refused", refused, func(h *harness) *call {
		cl := h.start("m")
		h.busy(cl, "")
		return cl
	}},
	{"parked", parked, func(h *harness) *call {
		cl := h.start("m", retrySafe)
		h.ack(cl)
		h.wire.away = true
		h.advance(testPolicy.silence)
		return cl
	}},
	{"local", local, func(h *harness) *call { return h.local("m") }},
}

// TestTransitions moves a call from every state by every event, and
// checks where it goes: to another state, or to its answer, once. A
// local call's handler has its context ended (its stop called, once)
// when the table answers the call without it, and not when the handler
// answered.
func TestTransitions(t *testing.T) {
	type want struct {
		state state
		code  int // of the answer, when answered; 0 a result
	}
	events := []struct {
		name    string
		message bool // the event is a message on the reply subject
		do      func(h *harness, cl *call)
		// by state; a state not listed stays as it was, unanswered
		want map[state]want
	}{
		{"ack", true, func(h *harness, cl *call) { h.ack(cl) }, map[state]want{published: {state: running}}},
		{"beat", true, func(h *harness, cl *call) { h.beat(cl) }, map[state]want{published: {state: running}}},
		{"report", true, func(h *harness, cl *call) {
			h.msg(cl, `{"percent":50}`, schema.HeaderProgress, schema.ProgressReport)
		}, map[state]want{published: {state: running}}},
		{"busy", true, func(h *harness, cl *call) { h.busy(cl, "") },
			map[state]want{published: {state: refused}, running: {state: refused}, parked: {state: refused}}},
		{"reply", true, func(h *harness, cl *call) { h.reply(cl, `"ok"`) },
			map[state]want{published: {state: answered}, running: {state: answered}, refused: {state: answered}, parked: {state: answered}}},
		{"deadline", false, func(h *harness, cl *call) { h.advance(cl.deadline.sub(momentOf(h.clk.now()))) },
			map[state]want{queued: {answered, schema.CodeTimeout}, published: {answered, schema.CodeTimeout},
				running: {answered, schema.CodeTimeout}, refused: {answered, schema.CodeTimeout}, parked: {answered, schema.CodeTimeout},
				local: {answered, schema.CodeTimeout}}},
		{"silence", false, func(h *harness, cl *call) { h.advance(testPolicy.silence) },
			map[state]want{running: {answered, schema.CodeUnavailable}, refused: {state: published}, parked: {state: parked}}},
		{"backoff", false, func(h *harness, cl *call) { h.advance(busyBackoffMin) },
			map[state]want{refused: {state: published}}},
		{"bus back", false, func(h *harness, cl *call) {
			h.wire.away = false
			h.advance(testPolicy.recheck)
		}, map[state]want{parked: {state: published}, refused: {state: published}}},
		{"cancel", false, func(h *harness, cl *call) { h.tb.cancel(cl.b) },
			map[state]want{queued: {answered, schema.CodeCanceled}, published: {answered, schema.CodeCanceled},
				running: {answered, schema.CodeCanceled}, refused: {answered, schema.CodeCanceled}, parked: {answered, schema.CodeCanceled},
				local: {answered, schema.CodeCanceled}}},
		{"local answer", false, func(h *harness, cl *call) { h.tb.answerLocal(cl, []byte(`"ok"`), nil) },
			map[state]want{local: {state: answered}}},
	}
	for _, s := range setups {
		for _, ev := range events {
			t.Run(s.name+"/"+ev.name, func(t *testing.T) {
				h := newHarness(t, testPolicy)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cl := s.make(h)
				cl.b.ctx = ctx
				if cl.state != s.state {
					t.Fatalf("setup: state %v, want %v", cl.state, s.state)
				}
				if ev.name == "cancel" {
					cancel()
				}
				if cl.token == "" && ev.message {
					t.Skip("a call never published (queued, or local) has no reply subject: no message can reach it")
				}
				ev.do(h, cl)
				w, ok := ev.want[s.state]
				if !ok {
					w = want{state: s.state}
				}
				if cl.state != w.state {
					t.Fatalf("state %v, want %v", cl.state, w.state)
				}
				// Only the table's own answer ends the handler's context:
				// a handler that answered has returned.
				wantStops := 0
				if s.state == local && w.state == answered && ev.name != "local answer" {
					wantStops = 1
				}
				if got := h.stopped[cl]; got != wantStops {
					t.Errorf("stop called %d times, want %d", got, wantStops)
				}
				if w.state != answered {
					h.open(cl)
					return
				}
				_, e := h.answer(cl)
				if got := code(e); got != w.code {
					t.Errorf("answer %v, want code %d", e, w.code)
				}
				if ev.name == "cancel" {
					// A call never published needs no cancel message.
					if announced, want := len(h.wire.canceled) > 0, s.state != queued && s.state != local; announced != want {
						t.Errorf("cancel message sent: %v, want %v", announced, want)
					}
				}
				h.empty()
			})
		}
	}
}

// TestLocalAnswerAfterItsEnd: a local handler's error that comes once
// the call's deadline passed or its batch ended, before the table saw
// either, is answered as the table answers those (a handler that listens
// to its context and one that does not are answered alike); a result is
// the call's answer whenever it comes first.
func TestLocalAnswerAfterItsEnd(t *testing.T) {
	toolErr := schema.NewError(schema.CodeToolError, "tool error: context deadline exceeded", nil)
	tests := []struct {
		name   string
		end    func(h *harness, cl *call, cancel context.CancelFunc)
		result []byte
		err    *schema.Error
		code   int
	}{
		{"error past the deadline", func(h *harness, cl *call, _ context.CancelFunc) {
			h.clk.advance(cl.deadline.sub(momentOf(h.clk.now())))
		}, nil, toolErr, schema.CodeTimeout},
		{"error after the batch ended", func(_ *harness, _ *call, cancel context.CancelFunc) { cancel() },
			nil, toolErr, schema.CodeCanceled},
		{"result past the deadline", func(h *harness, cl *call, _ context.CancelFunc) {
			h.clk.advance(cl.deadline.sub(momentOf(h.clk.now())))
		}, []byte(`"ok"`), nil, 0},
		{"error within the deadline", func(*harness, *call, context.CancelFunc) {}, nil, toolErr, schema.CodeToolError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testPolicy)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cl := h.newCall(ctx, "m")
			if !h.tb.enterLocal(cl) {
				t.Fatal("enterLocal of a call within its deadline = false, want it entered")
			}
			h.tb.localStarted(cl, func() { h.stopped[cl]++ })
			// The clock moves, or the context ends, without the timer's
			// tick or the batch's cancel: the handler answers first.
			tc.end(h, cl, cancel)
			h.tb.answerLocal(cl, tc.result, tc.err)
			r, e := h.answer(cl)
			if code(e) != tc.code || string(r) != string(tc.result) {
				t.Errorf("answer %s %v, want %s with code %d", r, e, tc.result, tc.code)
			}
			if tc.code != schema.CodeToolError && e != nil && e.Reason() != "" {
				t.Errorf("answer %v has reason %q, want none: the table's own answer", e, e.Reason())
			}
			if n := h.stopped[cl]; n != 0 {
				t.Errorf("stop called %d times, want none: the handler returned", n)
			}
			h.empty()
		})
	}
}

// TestLocalEntryAndExit: a call whose batch ended or whose deadline
// passed before it could start is answered so, not entered; a call the
// Local declined leaves the table, unless the table answered it
// meanwhile; a stop that comes after the table answered the call is
// called at once, and never kept.
func TestLocalEntryAndExit(t *testing.T) {
	t.Run("batch ended", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cl := h.newCall(ctx, "m")
		if h.tb.enterLocal(cl) {
			t.Fatal("enterLocal of a call whose batch ended = true, want false")
		}
		if _, e := h.answer(cl); code(e) != schema.CodeCanceled {
			t.Errorf("answer %v, want code %d", e, schema.CodeCanceled)
		}
		h.empty()
	})
	t.Run("deadline passed", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.newCall(context.Background(), "m")
		h.clk.advance(cl.timeout)
		if h.tb.enterLocal(cl) {
			t.Fatal("enterLocal of a call past its deadline = true, want false")
		}
		if _, e := h.answer(cl); code(e) != schema.CodeTimeout {
			t.Errorf("answer %v, want code %d", e, schema.CodeTimeout)
		}
		h.empty()
	})
	t.Run("declined", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.newCall(context.Background(), "m")
		h.tb.enterLocal(cl)
		if !h.tb.leaveLocal(cl) {
			t.Fatal("leaveLocal of a local call = false, want true")
		}
		if cl.state != outside {
			t.Errorf("state %v, want outside", cl.state)
		}
		h.open(cl)
		h.empty()
		// Outside, the call is the publisher's: the table's timer and
		// a second leave no longer touch it.
		h.advance(cl.timeout)
		h.open(cl)
		if h.tb.leaveLocal(cl) {
			t.Error("leaveLocal of a call outside the table = true, want false")
		}
	})
	t.Run("declined after the deadline", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.newCall(context.Background(), "m")
		h.tb.enterLocal(cl)
		h.advance(cl.timeout)
		if h.tb.leaveLocal(cl) {
			t.Fatal("leaveLocal of a call answered at its deadline = true, want false: it must not be published")
		}
		if _, e := h.answer(cl); code(e) != schema.CodeTimeout {
			t.Errorf("answer %v, want code %d", e, schema.CodeTimeout)
		}
		h.empty()
	})
	t.Run("started after the deadline", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.newCall(context.Background(), "m")
		h.tb.enterLocal(cl)
		h.advance(cl.timeout)
		h.tb.localStarted(cl, func() { h.stopped[cl]++ })
		if n := h.stopped[cl]; n != 1 {
			t.Errorf("stop called %d times, want once, at once: the call was answered before it started", n)
		}
		if cl.stop != nil {
			t.Error("stop kept on an answered call")
		}
		h.answer(cl)
	})
	t.Run("started after the answer", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.newCall(context.Background(), "m")
		h.tb.enterLocal(cl)
		// Allowed: the handler answers before StartLocal returns.
		h.tb.answerLocal(cl, []byte(`"ok"`), nil)
		h.tb.localStarted(cl, func() { h.stopped[cl]++ })
		if r, e := h.answer(cl); e != nil || string(r) != `"ok"` {
			t.Errorf("answer %s %v, want the handler's \"ok\"", r, e)
		}
		if cl.stop != nil {
			t.Error("stop kept on an answered call")
		}
		h.empty()
	})
}

func code(e *schema.Error) int {
	if e == nil {
		return 0
	}
	return e.Code
}

// A reply after the deadline, an ack after the reply and a message to
// a token nobody made answer nothing: the call keeps its first answer,
// and the messages are counted as strays, late or unmatched.
func TestMessagesAfterTheAnswer(t *testing.T) {
	h := newHarness(t, testPolicy)
	late := h.start("m", withTimeout(time.Second))
	h.ack(late)
	h.beat(late) // keeps it alive, not past its deadline
	h.advance(time.Second)
	h.reply(late, `"too late"`)
	if _, e := h.answer(late); code(e) != schema.CodeTimeout {
		t.Fatalf("answer %v, want the timeout, not the late reply", e)
	}
	done := h.start("m")
	h.reply(done, `"ok"`)
	h.ack(done)
	h.beat(done)
	if r, e := h.answer(done); e != nil || string(r) != `"ok"` {
		t.Fatalf("answer %s %v, want the reply", r, e)
	}
	h.to(h.tb.prefix+bus.ReplyToken(), string(replyBytes(t, `"forged"`)))
	if got := (Strays{Late: h.tb.late.Load(), Unmatched: h.tb.unmatched.Load()}); got != (Strays{Late: 3, Unmatched: 1}) {
		t.Errorf("strays = %+v, want 3 late and 1 unmatched", got)
	}
	if len(h.wire.canceled) != 0 {
		t.Errorf("cancel messages %v, want none: the deadline is the worker's too", h.wire.canceled)
	}
	h.empty()
}

// A retry-safe call nobody acknowledges is published again after the ack
// timeout, as often as its attempts allow; the first reply answers it and
// tells the other attempt to stop.
func TestAckTimeoutPublishesAgain(t *testing.T) {
	h := newHarness(t, testPolicy)
	cl := h.start("m", retrySafe)
	h.advance(testPolicy.ackTimeout)
	if cl.attempts != 2 || len(h.wire.sent) != 2 || cl.state != published {
		t.Fatalf("after the ack timeout: %d attempts, %d publications, %v; want 2, 2, published", cl.attempts, len(h.wire.sent), cl.state)
	}
	h.advance(testPolicy.ackTimeout)
	if len(h.wire.sent) != 2 {
		t.Fatalf("%d publications after the attempts ran out, want 2", len(h.wire.sent))
	}
	h.reply(cl, `"ok"`)
	h.answer(cl)
	if len(h.wire.canceled) != 1 {
		t.Errorf("%d cancel messages, want one for the other attempt", len(h.wire.canceled))
	}
	// Not retry-safe: waited for until the deadline.
	other := h.start("n")
	h.advance(testPolicy.ackTimeout)
	if len(h.wire.sent) != 3 || other.state != published {
		t.Errorf("a call not retry-safe: %d publications, %v; want it published once, waiting", len(h.wire.sent), other.state)
	}
}

// A worker that acknowledged a call and went silent has lost it: a call
// not retry-safe is answered worker_lost, may_have_run, after its
// silence and not before; beats keep it alive.
func TestSilenceLosesTheCall(t *testing.T) {
	h := newHarness(t, testPolicy)
	cl := h.start("m")
	h.ack(cl)
	for range 5 {
		h.advance(testPolicy.silence - time.Millisecond)
		h.beat(cl)
	}
	h.open(cl)
	h.advance(testPolicy.silence - time.Millisecond)
	h.open(cl)
	h.advance(time.Millisecond)
	_, e := h.answer(cl)
	if e.Reason() != schema.ReasonWorkerLost || !mayHaveRun(e) {
		t.Fatalf("answer %v, want worker_lost with may_have_run", e)
	}
}

// A refusal after a beat (one attempt ran, another was refused) puts
// the call in line again, as any refusal does; after the busy wait the
// call is answered workers_busy.
func TestRefusalAfterBeat(t *testing.T) {
	h := newHarness(t, testPolicy)
	cl := h.start("m")
	h.beat(cl)
	h.busy(cl, "")
	if cl.state != refused || !cl.askedFree {
		t.Fatalf("after a refusal: %v, asked for free slots %v; want refused, asking", cl.state, cl.askedFree)
	}
	for h.answered[cl] == 0 && momentOf(h.clk.now()) < cl.deadline {
		h.advance(busyBackoffMax)
		if cl.state == published {
			h.busy(cl, "")
		}
	}
	if _, e := h.answer(cl); e.Reason() != schema.ReasonWorkersBusy {
		t.Fatalf("answer %v, want workers_busy", e)
	}
	h.empty()
}

// A slot a reply names goes to the call first in line, which is sent to
// the worker's direct subject; when that worker turns out gone (NATS
// answers no responders), the call goes to the queue group and the
// worker's slots are not believed; when it takes the call and then goes
// silent, the call is lost like any other.
func TestFreeSlotHandOff(t *testing.T) {
	const direct = "toolbus.direct.w1"
	handOff := func(t *testing.T) (*harness, *call) {
		h := newHarness(t, testPolicy)
		first := h.start("m")
		h.busy(first, direct)
		holder := h.start("m")
		if !holder.askedFree {
			t.Fatal("a call of a method under pressure does not ask for free slots")
		}
		h.reply(holder, `"done"`, schema.HeaderDirect, direct, schema.HeaderFree, "1")
		if first.state != published || first.direct != direct || h.wire.last(t).subject != direct+".m" {
			t.Fatalf("after the slot was named: %v to %q (last sent to %q), want published to %s.m",
				first.state, first.direct, h.wire.last(t).subject, direct)
		}
		return h, first
	}
	t.Run("worker gone", func(t *testing.T) {
		h, cl := handOff(t)
		h.noResponders(cl)
		if cl.state != published || cl.direct != "" || h.wire.last(t).subject != "toolbus.call.m" {
			t.Fatalf("after no responders: %v to %q, want published to the queue group", cl.state, cl.direct)
		}
		if w := h.tb.slots.freed("m", direct, h.clk.now()); w != nil || len(h.tb.slots.free["m"]) != 0 {
			t.Error("a slot of the gone worker is believed")
		}
		h.open(cl)
	})
	t.Run("worker lost", func(t *testing.T) {
		h, cl := handOff(t)
		h.ack(cl)
		h.advance(testPolicy.silence)
		if _, e := h.answer(cl); e.Reason() != schema.ReasonWorkerLost {
			t.Fatalf("answer %v, want worker_lost", e)
		}
		h.empty()
	})
}

// A reply to a call that did not ask for free slots names none, however
// many it claims: nobody in line is sent there, and nothing is kept.
func TestUnaskedFreeSlotClaim(t *testing.T) {
	h := newHarness(t, testPolicy)
	cl := h.start("m")
	h.reply(cl, `"ok"`, schema.HeaderDirect, "toolbus.direct.rogue", schema.HeaderFree, "64")
	if len(h.tb.slots.free) != 0 {
		t.Errorf("slots kept %v, want none", h.tb.slots.free)
	}
}

// While the bus is away, a retry-safe call whose worker went silent is
// parked and published again once the connection is back, within its
// deadline; a call not retry-safe is answered worker_lost once its
// worker's heartbeats lapse, and a worker heard again before that (a
// quick reconnect) still answers it.
func TestDisconnect(t *testing.T) {
	t.Run("retry-safe", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.start("m", retrySafe)
		h.ack(cl)
		h.wire.away = true
		h.advance(testPolicy.silence)
		h.advance(testPolicy.recheck)
		if cl.state != parked || len(h.wire.sent) != 1 {
			t.Fatalf("bus away: %v after %d publications, want parked after 1", cl.state, len(h.wire.sent))
		}
		h.wire.away = false
		h.advance(testPolicy.recheck)
		if cl.state != published || len(h.wire.sent) != 2 || h.wire.last(t).reply != h.wire.sent[0].reply {
			t.Fatalf("bus back: %v after %d publications, want published again on the same reply subject", cl.state, len(h.wire.sent))
		}
		h.reply(cl, `"ok"`)
		if r, e := h.answer(cl); e != nil || string(r) != `"ok"` {
			t.Fatalf("answer %s %v, want the reply", r, e)
		}
	})
	t.Run("not retry-safe", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.start("m")
		h.ack(cl)
		h.wire.away = true
		h.advance(testPolicy.silence - time.Millisecond)
		h.open(cl)
		h.advance(time.Millisecond)
		if _, e := h.answer(cl); e.Reason() != schema.ReasonWorkerLost || !mayHaveRun(e) {
			t.Fatalf("answer %v, want worker_lost with may_have_run", e)
		}
	})
	t.Run("quick reconnect", func(t *testing.T) {
		h := newHarness(t, testPolicy)
		cl := h.start("m")
		h.ack(cl)
		h.wire.away = true
		h.advance(testPolicy.silence / 2)
		h.wire.away = false
		h.beat(cl)
		h.advance(testPolicy.silence / 2)
		h.reply(cl, `"ok"`)
		if r, e := h.answer(cl); e != nil || string(r) != `"ok"` {
			t.Fatalf("answer %s %v, want the reply", r, e)
		}
	})
}

// A hedge publishes a retry-safe call a second time when no reply came
// within its delay; the first reply answers it.
func TestHedge(t *testing.T) {
	p := testPolicy
	p.hedge = 50 * time.Millisecond
	h := newHarness(t, p)
	cl := h.start("m", retrySafe)
	h.ack(cl)
	h.advance(p.hedge)
	if cl.attempts != 2 || len(h.wire.sent) != 2 {
		t.Fatalf("after the hedge delay: %d attempts, %d publications; want 2 and 2", cl.attempts, len(h.wire.sent))
	}
	h.reply(cl, `"ok"`)
	h.answer(cl)
	if len(h.wire.canceled) != 1 {
		t.Errorf("%d cancel messages, want one for the other attempt", len(h.wire.canceled))
	}
}

// Reports reach the call's Progress in order, never after its answer.
func TestReportsBeforeTheAnswer(t *testing.T) {
	h := newHarness(t, testPolicy)
	var got []float64
	cl := h.start("m", withProgress(func(p float64, _ string) { got = append(got, p) }))
	h.msg(cl, `{"percent":10}`, schema.HeaderProgress, schema.ProgressReport)
	h.msg(cl, `not json`, schema.HeaderProgress, schema.ProgressReport)
	h.msg(cl, `{"percent":20}`, schema.HeaderProgress, schema.ProgressReport)
	h.reply(cl, `"ok"`)
	h.msg(cl, `{"percent":30}`, schema.HeaderProgress, schema.ProgressReport)
	if len(got) != 2 || got[0] != 10 || got[1] != 20 {
		t.Errorf("reports %v, want [10 20]", got)
	}
	h.answer(cl)
}

// Without liveness a call waits for its reply or its deadline: progress
// messages move nothing, and no timer but the deadline is armed.
func TestWithoutLiveness(t *testing.T) {
	h := newHarness(t, policy{maxAttempts: 1, recheck: time.Millisecond})
	cl := h.start("m", retrySafe)
	h.busy(cl, "")
	h.ack(cl)
	if cl.state != published || cl.askedFree || cl.ackAt != 0 {
		t.Fatalf("after progress messages: %v, asked free %v, ack timer %v; want published, nothing armed", cl.state, cl.askedFree, cl.ackAt)
	}
	h.advance(cl.deadline.sub(momentOf(h.clk.now())))
	if _, e := h.answer(cl); code(e) != schema.CodeTimeout {
		t.Fatalf("answer %v, want a timeout", e)
	}
	no := h.start("n")
	h.tb.deliver(&nats.Msg{Subject: h.subject(no), Header: nats.Header{"Status": []string{"503"}}})
	if _, e := h.answer(no); code(e) != schema.CodeMethodNotFound {
		t.Fatalf("no responders: answer %v, want -32601", e)
	}
}

// mayHaveRun reports whether e's data says the call may have run.
func mayHaveRun(e *schema.Error) bool {
	var d struct {
		MayHaveRun bool `json:"may_have_run"`
	}
	return e != nil && json.Unmarshal(e.Data, &d) == nil && d.MayHaveRun
}

// maxCallSize bounds a call's entry, which every call in flight holds.
const maxCallSize = 320

// TestCallSize: a call's entry stays within maxCallSize bytes, the size
// class it is allocated in when alone in its batch.
func TestCallSize(t *testing.T) {
	if got := unsafe.Sizeof(call{}); got > maxCallSize {
		t.Errorf("unsafe.Sizeof(call{}) = %d, want at most %d: every call in flight holds one, and 10,000 calls "+
			"in flight through one ingress must grow its resident memory by at most 40 MB (BENCHMARKS.md, "+
			"\"10,000 calls in flight\"); keep new fields that few calls use behind a pointer, as busyRefusals is",
			got, maxCallSize)
	}
}
