package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

var confirmQuestion = worker.Question{
	Message: "proceed with deploy?",
	Schema:  json.RawMessage(`{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`),
}

// asked is what one call of [worker.Ask] returned in a handler.
type asked struct {
	content json.RawMessage
	err     error
}

// askTool registers method, a tool that asks q and answers the content
// of the answer, or Ask's error; what Ask returned goes to the channel.
func askTool(t *testing.T, rt *worker.Runtime, method string, q worker.Question, opts ...worker.HandleOption) <-chan asked {
	t.Helper()
	got := make(chan asked, 8)
	if err := rt.HandleFunc(method, func(ctx context.Context, _ *worker.Request) (any, error) {
		content, err := worker.Ask(ctx, q)
		got <- asked{content, err}
		if err != nil {
			return nil, err
		}
		return content, nil
	}, opts...); err != nil {
		t.Fatal(err)
	}
	return got
}

func receive(t *testing.T, got <-chan asked) asked {
	t.Helper()
	select {
	case a := <-got:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's Ask never returned")
		return asked{}
	}
}

// fakeCall is the aggregator's side of one call with Toolbus-Ask-Key, as
// a job's runner sends it: it reads the progress messages and the reply on
// the call's reply subject, and answers questions sealed with the call's
// key.
type fakeCall struct {
	nc  *nats.Conn
	key schema.AskKey
	id  string // Toolbus-Call-Id
	sub *nats.Subscription
	// beats counts the beats read so far; seen holds every progress
	// message read, in order.
	beats int
	seen  []string
}

// askCall publishes a call of method from the cluster's caller, with a
// heartbeat every 20ms, a call id and a fresh ask key; edit, when not
// nil, changes the message first.
func (c *cluster) askCall(t *testing.T, method string, deadline time.Time, edit func(*nats.Msg)) *fakeCall {
	t.Helper()
	f := &fakeCall{nc: c.caller, key: schema.NewAskKey(), id: nuid.Next()}
	msg := callMsg(t, method, "", deadline)
	msg.Header.Set(schema.HeaderCallID, f.id)
	msg.Header.Set(schema.HeaderAskKey, f.key.String())
	msg.Header.Set(schema.HeaderHeartbeat, "20")
	if edit != nil {
		edit(msg)
	}
	f.sub = watchFrom(t, c.caller, msg, "")
	return f
}

// next reads the next message on the reply subject and files it.
func (f *fakeCall) next(t *testing.T) *nats.Msg {
	t.Helper()
	m := next(t, f.sub)
	if p := m.Header.Get(schema.HeaderProgress); p != "" {
		f.seen = append(f.seen, p)
		if p == schema.ProgressBeat {
			f.beats++
		}
	}
	return m
}

// question reads up to the next question and returns it with its answer
// subject; it fails the test when the reply comes first.
func (f *fakeCall) question(t *testing.T) (schema.Question, string) {
	t.Helper()
	// A question that waits goes again every ten heartbeats.
	for range 100 {
		m := f.next(t)
		switch m.Header.Get(schema.HeaderProgress) {
		case schema.ProgressQuestion:
			q, err := schema.UnmarshalQuestion(m.Data)
			if err != nil {
				t.Fatalf("question body %s: %v", m.Data, err)
			}
			return q, m.Header.Get(schema.HeaderAskReply)
		case "":
			t.Fatalf("the reply %s came before a question", describeReply(t, m))
		}
	}
	t.Fatalf("no question among 100 progress messages: %v", f.seen)
	return schema.Question{}, ""
}

// reply reads up to the reply and decodes it.
func (f *fakeCall) reply(t *testing.T) *schema.ReplyEnvelope {
	t.Helper()
	for {
		if m := f.next(t); m.Header.Get(schema.HeaderProgress) == "" {
			r, err := bus.ReadReply(m)
			if err != nil {
				t.Fatalf("ReadReply: %v", err)
			}
			return r
		}
	}
}

// replyUnasked reads up to the reply as reply does, and fails the test
// when a question comes first.
func (f *fakeCall) replyUnasked(t *testing.T) *schema.ReplyEnvelope {
	t.Helper()
	for {
		m := f.next(t)
		switch m.Header.Get(schema.HeaderProgress) {
		case schema.ProgressQuestion:
			t.Fatalf("a question %s, in a call that cannot be asked", m.Data)
		case "":
			r, err := bus.ReadReply(m)
			if err != nil {
				t.Fatalf("ReadReply: %v", err)
			}
			return r
		}
	}
}

// answer seals a with key for subject and publishes it from the caller.
func (f *fakeCall) answer(t *testing.T, key schema.AskKey, subject string, a schema.Answer) {
	t.Helper()
	body, err := schema.SealAnswer(key, subject, a)
	if err != nil {
		t.Fatalf("SealAnswer: %v", err)
	}
	if err := f.nc.Publish(subject, body); err != nil {
		t.Fatal(err)
	}
}

func describeReply(t *testing.T, m *nats.Msg) string {
	t.Helper()
	r, err := bus.ReadReply(m)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if e := r.Err(); e != nil {
		return e.Error() + " " + string(e.Data)
	}
	return string(r.Result)
}

func accept(id, content string) schema.Answer {
	return schema.Answer{ID: id, Action: schema.AskAccept, Content: json.RawMessage(content)}
}

func TestAskAccept(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	f := c.askCall(t, "confirm", time.Time{}, nil)
	q, subject := f.question(t)
	if f.seen[0] != schema.ProgressAck {
		t.Errorf("progress messages %v, want the ack first", f.seen)
	}
	if q.Message != confirmQuestion.Message || !bytes.Equal(q.Schema, confirmQuestion.Schema) {
		t.Errorf("question = %q %s, want %q %s", q.Message, q.Schema, confirmQuestion.Message, confirmQuestion.Schema)
	}
	if err := schema.CheckAnswerSubject(subject); err != nil || !strings.HasPrefix(subject, "_INBOX.ask.") {
		t.Errorf("answer subject %q (%v), want _INBOX.ask.<token>, the runtime's inbox prefix", subject, err)
	}
	f.answer(t, f.key, subject, accept(q.ID, `{"confirmed":true}`))
	a := receive(t, got)
	if a.err != nil || string(a.content) != `{"confirmed":true}` {
		t.Errorf("Ask = %s, %v, want {\"confirmed\":true}", a.content, a.err)
	}
	if r := f.reply(t); r.Err() != nil || string(r.Result) != `{"confirmed":true}` {
		t.Errorf("reply = %s %v, want the content", r.Result, r.Err())
	}
}

func TestAskDeclineAndCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action schema.AskAction
		want   error
		code   int
	}{
		{name: "decline", action: schema.AskDecline, want: worker.ErrDeclined, code: schema.CodeToolError},
		{name: "cancel", action: schema.AskCancel, want: worker.ErrAskCanceled, code: schema.CodeCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, bus.EmbeddedConfig{})
			got := askTool(t, c.rt, "confirm", confirmQuestion)
			c.start(t)
			f := c.askCall(t, "confirm", time.Time{}, nil)
			q, subject := f.question(t)
			f.answer(t, f.key, subject, schema.Answer{ID: q.ID, Action: tc.action})
			if a := receive(t, got); !errors.Is(a.err, tc.want) {
				t.Errorf("Ask = %s, %v, want %v", a.content, a.err, tc.want)
			}
			if e := f.reply(t).Err(); e == nil || e.Code != tc.code {
				t.Errorf("reply error = %v, want code %d", e, tc.code)
			}
		})
	}
}

// TestAskCallCanceled: a cancel message (rule 7) ends the wait.
func TestAskCallCanceled(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	f := c.askCall(t, "confirm", time.Time{}, nil)
	f.question(t)
	if err := c.caller.Publish(bus.DefaultPrefix+".cancel", []byte(f.id)); err != nil {
		t.Fatal(err)
	}
	if a := receive(t, got); !errors.Is(a.err, context.Canceled) {
		t.Errorf("Ask = %s, %v, want %v", a.content, a.err, context.Canceled)
	}
}

// TestAskDeadline: the call's deadline ends the wait, and the call is
// answered as any call past its deadline in the worker.
func TestAskDeadline(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	f := c.askCall(t, "confirm", time.Now().Add(500*time.Millisecond), nil)
	f.question(t)
	if a := receive(t, got); !errors.Is(a.err, context.DeadlineExceeded) {
		t.Errorf("Ask = %s, %v, want %v", a.content, a.err, context.DeadlineExceeded)
	}
	if e := f.reply(t).Err(); e == nil || e.Code != schema.CodeTimeout || e.Reason() != schema.ReasonDeadlineInWorker {
		t.Errorf("reply error = %v, want -32001 %s", e, schema.ReasonDeadlineInWorker)
	}
}

// TestAskForgeryIgnored: messages on the answer subject that are not the
// answer (sealed with another key, sealed for another subject, naming
// another question, not sealed at all) are dropped and counted, and the
// real answer that follows is taken.
func TestAskForgeryIgnored(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	f := c.askCall(t, "confirm", time.Time{}, nil)
	q, subject := f.question(t)

	rogue := c.connect(t) // another worker, with the same credential
	forged := accept(q.ID, `{"confirmed":false}`)
	f.nc = rogue
	f.answer(t, schema.NewAskKey(), subject, forged)
	f.answer(t, f.key, subject+"x", forged) // sealed for another subject
	if err := rogue.Publish(subject, []byte(`{"id":"`+q.ID+`","action":"accept","content":{"confirmed":false}}`)); err != nil {
		t.Fatal(err)
	}
	f.nc = c.caller
	f.answer(t, f.key, subject, accept("another-question", `{"confirmed":false}`))
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	f.answer(t, f.key, subject, accept(q.ID, `{"confirmed":true}`))

	if a := receive(t, got); a.err != nil || string(a.content) != `{"confirmed":true}` {
		t.Errorf("Ask = %s, %v, want the real answer {\"confirmed\":true}", a.content, a.err)
	}
	// The sealed-for-another-subject one went nowhere: three reached
	// the subject and were dropped.
	dropped := func() float64 {
		return value(t, reg, "toolbus_worker_answers_dropped_total", map[string]string{"method": "confirm"})
	}
	if n := dropped(); n != 3 {
		t.Errorf("answers dropped = %v, want 3", n)
	}
}

// TestAskOtherWorkerCannotRead: another worker with the same credential
// may listen on the answer subject, but cannot open what it hears.
func TestAskOtherWorkerCannotRead(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	rogue := c.connect(t)
	heard, err := rogue.SubscribeSync("_INBOX.ask.*")
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	f := c.askCall(t, "confirm", time.Time{}, nil)
	q, subject := f.question(t)
	const secret = `{"confirmed":true}`
	f.answer(t, f.key, subject, accept(q.ID, secret))
	if a := receive(t, got); a.err != nil || string(a.content) != secret {
		t.Fatalf("Ask = %s, %v, want %s", a.content, a.err, secret)
	}
	m, err := heard.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the other worker heard nothing on %s: %v", subject, err)
	}
	if bytes.Contains(m.Data, []byte("confirmed")) {
		t.Errorf("the sealed answer %q shows its content", m.Data)
	}
	// It knows no key of the call; any it guesses does not open it.
	if a, err := schema.OpenAnswer(schema.NewAskKey(), subject, m.Data); !errors.Is(err, schema.ErrBadAnswer) {
		t.Errorf("OpenAnswer with another key = %+v, %v, want %v", a, err, schema.ErrBadAnswer)
	}
}

// TestAskCannotAsk: a call whose caller cannot answer fails at once with
// ErrCannotAsk, which the call is answered as a -32000 that says to run
// the tool as a job, and no question leaves.
func TestAskCannotAsk(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*nats.Msg)
	}{
		{name: "no key", edit: func(m *nats.Msg) { m.Header.Del(schema.HeaderAskKey) }},
		{name: "key without heartbeat", edit: func(m *nats.Msg) { m.Header.Del(schema.HeaderHeartbeat) }},
		{name: "not a key", edit: func(m *nats.Msg) { m.Header.Set(schema.HeaderAskKey, "short") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, bus.EmbeddedConfig{})
			got := askTool(t, c.rt, "confirm", confirmQuestion)
			c.start(t)
			f := c.askCall(t, "confirm", time.Time{}, tc.edit)
			if a := receive(t, got); !errors.Is(a.err, worker.ErrCannotAsk) {
				t.Errorf("Ask = %s, %v, want %v", a.content, a.err, worker.ErrCannotAsk)
			}
			e := f.replyUnasked(t).Err()
			if e == nil || e.Code != schema.CodeToolError || e.Reason() != schema.ReasonCannotAsk || !strings.Contains(e.Message, schema.MethodJobsSubmit) {
				t.Errorf("reply error = %v %s, want -32000 %s naming %s", e, e.Data, schema.ReasonCannotAsk, schema.MethodJobsSubmit)
			}
		})
	}
}

// TestAskCannotAskLocally: calls run in the process, by Invoke or
// TryInvoke, cannot be asked, also from a handler whose own call can.
func TestAskCannotAskLocally(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	nested := make(chan error, 1)
	if err := c.rt.HandleFunc("outer", func(ctx context.Context, _ *worker.Request) (any, error) {
		_, err := c.rt.Invoke(ctx, schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: "confirm"}}, nil)
		nested <- err
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	call := schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: "confirm"}}

	if _, rpcErr := c.rt.Invoke(context.Background(), call, nil); rpcErr == nil || rpcErr.Reason() != schema.ReasonCannotAsk {
		t.Errorf("Invoke = %v, want %s", rpcErr, schema.ReasonCannotAsk)
	}
	if a := receive(t, got); !errors.Is(a.err, worker.ErrCannotAsk) {
		t.Errorf("Ask in Invoke = %v, want %v", a.err, worker.ErrCannotAsk)
	}
	if _, rpcErr, ok := c.rt.TryInvoke(context.Background(), &call); !ok || rpcErr == nil || rpcErr.Reason() != schema.ReasonCannotAsk {
		t.Errorf("TryInvoke = %v (taken: %v), want %s", rpcErr, ok, schema.ReasonCannotAsk)
	}
	if a := receive(t, got); !errors.Is(a.err, worker.ErrCannotAsk) {
		t.Errorf("Ask in TryInvoke = %v, want %v", a.err, worker.ErrCannotAsk)
	}

	// outer's own call could be asked; confirm, run from it, cannot.
	f := c.askCall(t, "outer", time.Time{}, nil)
	if r := f.replyUnasked(t); r.Err() != nil {
		t.Fatalf("outer = %v", r.Err())
	}
	if a := receive(t, got); !errors.Is(a.err, worker.ErrCannotAsk) {
		t.Errorf("Ask in a tool Invoked from an asking call = %v, want %v", a.err, worker.ErrCannotAsk)
	}
}

// TestAskKeepsTheCallAlive: while the tool waits, heartbeats go on, the
// question goes again every ten of them with the same id and subject, and
// the call holds its slot.
func TestAskKeepsTheCallAlive(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion, worker.Concurrency(1))
	c.start(t)
	f := c.askCall(t, "confirm", time.Time{}, nil)
	q, subject := f.question(t)
	before := f.beats
	again, againSubject := f.question(t)
	if beats := f.beats - before; beats != 9 {
		t.Errorf("%d beats between the question and its repetition, want 9", beats)
	}
	if again.ID != q.ID || againSubject != subject {
		t.Errorf("repeated question %s on %s, want %s on %s", again.ID, againSubject, q.ID, subject)
	}
	// The slot is held: a second call is refused busy.
	busy := watchFrom(t, c.caller, callMsg(t, "confirm", "", time.Time{}), "20")
	if p := next(t, busy).Header.Get(schema.HeaderProgress); p != schema.ProgressBusy {
		t.Errorf("a second call while the first waits: %q, want %q", p, schema.ProgressBusy)
	}
	f.answer(t, f.key, subject, accept(q.ID, `{"confirmed":false}`))
	if a := receive(t, got); a.err != nil || string(a.content) != `{"confirmed":false}` {
		t.Errorf("Ask = %s, %v", a.content, a.err)
	}
	if r := f.reply(t); r.Err() != nil {
		t.Errorf("reply = %v", r.Err())
	}
}

// TestAskAfterTheHeldBackAck: a question asked before the held-back ack
// is due comes after the ack, as every progress message does.
func TestAskAfterTheHeldBackAck(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "confirm", confirmQuestion)
	c.start(t)
	f := c.askCall(t, "confirm", time.Time{}, func(m *nats.Msg) {
		m.Header.Set(schema.HeaderHeartbeat, "5000")
		m.Header.Set(schema.HeaderAckDelay, "5000")
	})
	q, subject := f.question(t)
	if len(f.seen) != 2 || f.seen[0] != schema.ProgressAck {
		t.Errorf("progress messages %v, want the ack, then the question", f.seen)
	}
	f.answer(t, f.key, subject, schema.Answer{ID: q.ID, Action: schema.AskDecline})
	receive(t, got)
}

// TestAskOneQuestionAtATime: two questions of one call asked at once go
// one after the other.
func TestAskOneQuestionAtATime(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := make(chan asked, 2)
	if err := c.rt.HandleFunc("twice", func(ctx context.Context, _ *worker.Request) (any, error) {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				content, err := worker.Ask(ctx, confirmQuestion)
				got <- asked{content, err}
			})
		}
		wg.Wait()
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	f := c.askCall(t, "twice", time.Time{}, nil)
	first, subject := f.question(t)
	// Past a repetition of the first, the second has not been asked.
	for f.beats < 12 {
		if m := f.next(t); m.Header.Get(schema.HeaderProgress) == schema.ProgressQuestion {
			if q, _ := schema.UnmarshalQuestion(m.Data); q.ID != first.ID {
				t.Fatalf("question %s asked while %s waits", q.ID, first.ID)
			}
		}
	}
	f.answer(t, f.key, subject, accept(first.ID, `{"confirmed":true}`))
	// The first may go once more before its answer is in.
	second, subject2 := f.question(t)
	for second.ID == first.ID {
		second, subject2 = f.question(t)
	}
	if second.ID == first.ID || subject2 == subject {
		t.Errorf("second question %s on %s, want another id and subject than %s on %s", second.ID, subject2, first.ID, subject)
	}
	f.answer(t, f.key, subject2, accept(second.ID, `{"confirmed":false}`))
	for range 2 {
		if a := receive(t, got); a.err != nil {
			t.Errorf("Ask = %v", a.err)
		}
	}
	if r := f.reply(t); r.Err() != nil {
		t.Errorf("reply = %v", r.Err())
	}
}

// TestAskRefusesABadQuestion: a question outside rule 11's flat schema
// fails before anything is sent, naming the member.
func TestAskRefusesABadQuestion(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := askTool(t, c.rt, "nested", worker.Question{Message: "where?",
		Schema: json.RawMessage(`{"type":"object","properties":{"place":{"type":"object"}}}`)})
	c.start(t)
	f := c.askCall(t, "nested", time.Time{}, nil)
	a := receive(t, got)
	var fe *schema.FieldError
	if !errors.Is(a.err, schema.ErrBadQuestion) || !errors.As(a.err, &fe) || fe.Field != "/properties/place/type" {
		t.Errorf("Ask = %v, want %v naming /properties/place/type", a.err, schema.ErrBadQuestion)
	}
	f.replyUnasked(t)
}

// TestAskKeyNotShown: the handler's request does not show the key.
func TestAskKeyNotShown(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("headers", func(_ context.Context, req *worker.Request) (any, error) {
		return map[string]bool{"key": req.Header.Get(schema.HeaderAskKey) != "", "call_id": req.Header.Get(schema.HeaderCallID) != ""}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	f := c.askCall(t, "headers", time.Time{}, nil)
	if r := f.reply(t); string(r.Result) != `{"call_id":true,"key":false}` {
		t.Errorf("headers the handler saw = %s %v, want the call id and no key", r.Result, r.Err())
	}
}

// TestAsksDeclared: Asks and Describe with Asks set "asks" in the
// descriptor the runtime announces; other tools do not.
func TestAsksDeclared(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	askTool(t, c.rt, "confirm", confirmQuestion, worker.Asks())
	askTool(t, c.rt, "pick", confirmQuestion, worker.Describe(schema.Descriptor{Description: "picks", Asks: true}), worker.Describe(schema.Descriptor{Version: "2"}))
	askTool(t, c.rt, "plain", confirmQuestion)
	want := map[string]bool{"confirm": true, "pick": true, "plain": false}
	for _, d := range c.rt.Descriptors() {
		if d.Asks != want[d.Name] {
			t.Errorf("descriptor of %s: asks %v, want %v", d.Name, d.Asks, want[d.Name])
		}
	}
}
