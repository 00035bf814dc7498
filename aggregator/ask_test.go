package aggregator_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestAskKeyHeader(t *testing.T) {
	ask := func(schema.Question, func(schema.Answer) error) {}
	tests := []struct {
		name string
		opts []aggregator.Option
		ask  func(schema.Question, func(schema.Answer) error)
		want bool
	}{
		{name: "asked with heartbeats", ask: ask, want: true},
		{name: "not asked", ask: nil, want: false},
		{name: "asked without heartbeats", opts: []aggregator.Option{aggregator.WithHeartbeat(0, 1)}, ask: ask, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			got := make(chan nats.Header, 1)
			rawServe(t, wc, "k", func(m *nats.Msg, _ int) {
				got <- m.Header
				bus.Reply(m, schema.ReplyResult([]byte(`1`)))
			})
			a := newAgg(t, ac, tc.opts...)
			c := call(`1`, "k", "")
			c.Ask = tc.ask
			if r := schema.Collect(context.Background(), a, []schema.Call{c})[0]; r.Error != nil {
				t.Fatalf("Dispatch = %v, want a result", r.Error)
			}
			v := (<-got).Get(schema.HeaderAskKey)
			if _, err := schema.ParseAskKey(v); (err == nil) != tc.want || (v != "") != tc.want {
				t.Errorf("%s = %q, want a key: %v", schema.HeaderAskKey, v, tc.want)
			}
		})
	}
}

// askingWorker serves method "ask" as a tool that asks: it acks, then
// publishes each body of questions in turn with its answer subject, each
// after the answer to the one before, and replies with the actions it was
// answered, opened with the call's key.
func askingWorker(t *testing.T, wc *nats.Conn, questions []struct{ subject, body string }) {
	t.Helper()
	rawServe(t, wc, "ask", func(m *nats.Msg, _ int) {
		key, err := schema.ParseAskKey(m.Header.Get(schema.HeaderAskKey))
		if err != nil {
			bus.Reply(m, schema.ReplyError(schema.NewError(schema.CodeToolError, "no key", nil)))
			return
		}
		progress(m, schema.ProgressAck)
		var got []schema.Answer
		for _, q := range questions {
			sub, err := wc.SubscribeSync(q.subject)
			if err != nil {
				t.Error(err)
				return
			}
			m.RespondMsg(&nats.Msg{Data: []byte(q.body), Header: nats.Header{
				schema.HeaderProgress: []string{schema.ProgressQuestion}, schema.HeaderAskReply: []string{q.subject}}})
			if q.subject == "toolbus.call.evil" {
				sub.Unsubscribe()
				continue
			}
			msg, err := sub.NextMsg(10 * time.Second)
			sub.Unsubscribe()
			if err != nil {
				t.Errorf("no answer on %s: %v", q.subject, err)
				return
			}
			a, err := schema.OpenAnswer(key, q.subject, msg.Data)
			if err != nil {
				t.Errorf("answer on %s does not open: %v", q.subject, err)
				return
			}
			got = append(got, a)
		}
		b, _ := json.Marshal(got)
		bus.Reply(m, schema.ReplyResult(b))
	})
}

const (
	goodSchema = `{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`
	answerSub  = "_INBOX_worker.ask.abcdefghijklmnopqrstuv"
)

// TestQuestionsReachAsk checks that a question is handed to the call's
// Ask, whose answer the worker opens with the call's key; that one whose
// schema breaks the rules is answered cancel by the aggregator itself;
// and that one whose answer subject is not under an inbox prefix is
// dropped, nothing being published there.
func TestQuestionsReachAsk(t *testing.T) {
	ac, wc := setup(t)
	evil, err := wc.SubscribeSync("toolbus.call.evil")
	if err != nil {
		t.Fatal(err)
	}
	askingWorker(t, wc, []struct{ subject, body string }{
		{"toolbus.call.evil", `{"id":"evil","message":"m","schema":` + goodSchema + `}`},
		{answerSub, `{"id":"bad","message":"m","schema":{"type":"object","properties":{"x":{"type":"array"}}}}`},
		{answerSub, `{"id":"good","message":"proceed?","schema":` + goodSchema + `}`},
	})
	a := newAgg(t, ac)
	var asked atomic.Int64
	c := call(`1`, "ask", "")
	c.Ask = func(q schema.Question, answer func(schema.Answer) error) {
		asked.Add(1)
		if q.ID != "good" || q.Message != "proceed?" {
			t.Errorf("Ask got %+v, want only the good question", q)
		}
		go answer(schema.Answer{ID: q.ID, Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":true}`)})
	}
	r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
	if want := `[{"id":"bad","action":"cancel"},{"id":"good","action":"accept","content":{"confirmed":true}}]`; r.Error != nil || string(r.Result) != want {
		t.Fatalf("answers the worker opened = %s %v, want %s", r.Result, r.Error, want)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("Ask called %d times, want 1", n)
	}
	// What the aggregator published reached the server before its
	// flush's answer, and the worker's connection before its own.
	if err := ac.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := evil.NextMsg(0); err == nil {
		t.Errorf("published on toolbus.call.evil: %q", m.Data)
	}
}

// TestQuestionsDroppedCounted checks that every question the aggregator
// drops is counted by why, in [aggregator.Aggregator.QuestionsDropped]
// and in toolbus_aggregator_questions_dropped_total: one to a call that
// cannot be asked, one naming an answer subject outside an inbox, and
// one whose schema breaks rule 11; the question it hands to Ask is not.
func TestQuestionsDroppedCounted(t *testing.T) {
	ac, wc := setup(t)
	askingWorker(t, wc, []struct{ subject, body string }{
		{"toolbus.call.evil", `{"id":"evil","message":"m","schema":` + goodSchema + `}`},
		{answerSub, `{"id":"bad","message":"m","schema":{"type":"object","properties":{"x":{"type":"array"}}}}`},
		{answerSub, `{"id":"good","message":"proceed?","schema":` + goodSchema + `}`},
	})
	// A worker that asks though its call carries no key.
	rawServe(t, wc, "rogue", func(m *nats.Msg, _ int) {
		progress(m, schema.ProgressAck)
		m.RespondMsg(&nats.Msg{Data: []byte(`{"id":"q","message":"m","schema":` + goodSchema + `}`), Header: nats.Header{
			schema.HeaderProgress: []string{schema.ProgressQuestion}, schema.HeaderAskReply: []string{answerSub}}})
		bus.Reply(m, schema.ReplyResult([]byte(`1`)))
	})
	a := newAgg(t, ac)
	asking := call(`1`, "ask", "")
	asking.Ask = func(q schema.Question, answer func(schema.Answer) error) {
		go answer(schema.Answer{ID: q.ID, Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":true}`)})
	}
	for _, r := range schema.Collect(context.Background(), a, []schema.Call{asking, call(`2`, "rogue", "")}) {
		if r.Error != nil {
			t.Fatalf("call %s = %v, want a result", r.ID, r.Error)
		}
	}
	// A call's messages are handled in order: its questions were, before
	// its reply.
	if got, want := a.QuestionsDropped(), (aggregator.QuestionsDropped{CannotAsk: 1, AnswerSubject: 1, Invalid: 1}); got != want {
		t.Errorf("QuestionsDropped() = %+v, want %+v", got, want)
	}
	exp := `
# HELP toolbus_aggregator_questions_dropped_total Questions of tools (rule 11 of PROTOCOL.md) dropped by the aggregator: reason "cannot_ask" came to a call whose caller cannot answer; "answer_subject" named a subject the aggregator may not publish on; "invalid" broke the rule otherwise and was answered cancel.
# TYPE toolbus_aggregator_questions_dropped_total counter
toolbus_aggregator_questions_dropped_total{reason="answer_subject",reply_prefix="_INBOX"} 1
toolbus_aggregator_questions_dropped_total{reason="cannot_ask",reply_prefix="_INBOX"} 1
toolbus_aggregator_questions_dropped_total{reason="invalid",reply_prefix="_INBOX"} 1
`
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(exp), "toolbus_aggregator_questions_dropped_total"); err != nil {
		t.Error(err)
	}
}
