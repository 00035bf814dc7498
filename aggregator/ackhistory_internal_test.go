package aggregator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// delayPolicy is the harness's policy with an ack delay of 20ms: a silent
// call is lost 320ms after its publication when its method's workers
// acknowledge.
var delayPolicy = func() policy {
	p := testPolicy
	p.ackDelay = 20 * time.Millisecond
	return p
}()

// ackedCall runs a call of m that its worker acknowledges once the delay
// has passed, then answers.
func ackedCall(h *harness) {
	cl := h.start("m")
	h.advance(h.tb.policy.ackDelay)
	h.ack(cl)
	h.reply(cl, `1`)
}

// lostCall runs a call of m that nobody speaks for, until it is
// answered lost, and returns it.
func lostCall(h *harness) *call {
	h.t.Helper()
	cl := h.start("m")
	h.advance(h.tb.policy.quiet())
	if _, e := h.answer(cl); e.Reason() != schema.ReasonWorkerLost {
		h.t.Fatalf("setup: silent call answered %v, want %s", e, schema.ReasonWorkerLost)
	}
	return cl
}

// TestSilenceWithinTheAckDelay publishes a call that nobody speaks for.
// When its method's workers are known to acknowledge, it lets its worker
// hold back the ack, and is answered worker_lost once the delay and the
// silence of a lost worker have passed; otherwise it asks for the ack at
// once and is waited for until its deadline, as a call whose worker
// never acknowledged always was.
func TestSilenceWithinTheAckDelay(t *testing.T) {
	quick := delayPolicy
	quick.ackTimeout = 100 * time.Millisecond // a late reply before the silence ends
	tests := []struct {
		name   string
		policy policy
		// before is what the workers of m did before the silent call.
		before   func(h *harness)
		wantLost bool
	}{
		{name: "a method never acknowledged is waited for", policy: delayPolicy},
		{name: "a method whose workers acknowledge is lost", policy: delayPolicy, before: ackedCall, wantLost: true},
		{name: "a reply within the delay needs no ack", policy: delayPolicy, wantLost: true, before: func(h *harness) {
			ackedCall(h)
			cl := h.start("m")
			h.advance(h.tb.policy.ackDelay / 2)
			h.reply(cl, `1`)
		}},
		{name: "an ack after the delay", policy: delayPolicy, wantLost: true, before: func(h *harness) {
			ackedCall(h)
			cl := h.start("m")
			h.advance(h.tb.policy.ackDelay + h.tb.policy.silence/2)
			h.ack(cl)
			h.reply(cl, `1`)
		}},
		{name: "a reply without an ack long after the delay shows a worker that never acknowledges", policy: quick, before: func(h *harness) {
			ackedCall(h)
			cl := h.start("m")
			h.advance(h.tb.policy.ackDelay + h.tb.policy.ackTimeout)
			h.reply(cl, `1`)
		}},
		{name: "a reply to a call lost for want of an ack shows a worker that never acknowledges", policy: delayPolicy, before: func(h *harness) {
			ackedCall(h)
			cl := lostCall(h)
			h.reply(cl, `1`)
		}},
		{name: "an ack to a call lost for want of one shows nothing", policy: delayPolicy, wantLost: true, before: func(h *harness) {
			ackedCall(h)
			cl := lostCall(h)
			h.ack(cl)
		}},
		{name: "a worker that never acknowledges is forgotten after a quiet hour", policy: delayPolicy, wantLost: true, before: func(h *harness) {
			ackedCall(h)
			h.reply(lostCall(h), `1`)
			h.clk.advance(distrustFor)
		}},
		{name: "another method's acks say nothing of this one", policy: delayPolicy, before: func(h *harness) {
			cl := h.start("other")
			h.ack(cl)
			h.reply(cl, `1`)
		}},
		{name: "without a delay a silent call is waited for", policy: testPolicy, before: ackedCall},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.policy)
			if tc.before != nil {
				tc.before(h)
			}
			h.empty()
			cl := h.start("m", withTimeout(10*time.Second))
			// The call lets its worker hold back the ack exactly when a
			// worker silent for the delay and the silence is lost.
			want := ""
			if tc.wantLost {
				want = "20"
			}
			if got := h.wire.last(t).ackDelay; got != want {
				t.Errorf("%s header = %q, want %q", schema.HeaderAckDelay, got, want)
			}
			quiet := h.tb.policy.ackDelay + h.tb.policy.silence
			h.advance(quiet - time.Millisecond)
			h.open(cl)
			h.advance(time.Millisecond)
			if !tc.wantLost {
				h.open(cl)
				h.advance(cl.deadline.sub(momentOf(h.clk.now())))
				if _, e := h.answer(cl); code(e) != schema.CodeTimeout {
					t.Fatalf("silent call answered %v at its deadline, want %d", e, schema.CodeTimeout)
				}
				h.empty()
				return
			}
			_, e := h.answer(cl)
			if code(e) != schema.CodeUnavailable || e.Reason() != schema.ReasonWorkerLost {
				t.Fatalf("silent call answered %v, want %d %s", e, schema.CodeUnavailable, schema.ReasonWorkerLost)
			}
			var data struct {
				MayHaveRun bool  `json:"may_have_run"`
				SilenceMS  int64 `json:"silence_ms"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil || !data.MayHaveRun || data.SilenceMS != quiet.Milliseconds() {
				t.Errorf("data = %s, want may_have_run and silence_ms %d", e.Data, quiet.Milliseconds())
			}
			if n := len(h.wire.canceled); n != 0 {
				t.Errorf("%d cancel messages, want none: nobody holds the call", n)
			}
			h.empty()
		})
	}
}

// TestRetrySafeSilenceWithinTheAckDelay checks that a retry-safe call
// whose worker was lost before its ack was due is published again, and
// lost once its attempts are spent.
func TestRetrySafeSilenceWithinTheAckDelay(t *testing.T) {
	h := newHarness(t, delayPolicy)
	ackedCall(h)
	cl := h.start("m", retrySafe)
	sent := len(h.wire.sent)
	h.advance(delayPolicy.quiet())
	h.open(cl)
	if got := len(h.wire.sent) - sent; got != 1 || cl.state != published || cl.attempts != 2 {
		t.Fatalf("after the silence: %d more publications, state %v, attempt %d; want 1, published, 2", got, cl.state, cl.attempts)
	}
	h.advance(delayPolicy.quiet())
	if _, e := h.answer(cl); e.Reason() != schema.ReasonWorkerLost {
		t.Fatalf("answered %v once its attempts were spent, want %s", e, schema.ReasonWorkerLost)
	}
	h.empty()
}

// TestAckHistoryForgets checks that the history forgets everything
// rather than grow past its bounds, and that forgetting a method makes
// it one to wait for.
func TestAckHistoryForgets(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newAckHistory()
	h.acked("m")
	for i := range maxMethodsTracked {
		h.acked("other." + time.Duration(i).String())
	}
	if len(h.methods) > maxMethodsTracked {
		t.Errorf("%d methods tracked, want at most %d", len(h.methods), maxMethodsTracked)
	}
	if h.acknowledges("m", now) {
		t.Error("acknowledges(m) = true after the history was emptied, want false")
	}
	for i := range maxLostRemembered + 1 {
		h.lostUnacked(time.Duration(i).String(), "m")
	}
	if len(h.lost) > maxLostRemembered {
		t.Errorf("%d lost calls remembered, want at most %d", len(h.lost), maxLostRemembered)
	}
}
