package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Question is what a tool asks its caller with [Ask]: a message for a
// person, and the JSON Schema of the answer, a flat object schema (see
// [schema.CheckQuestionSchema]: properties of type string, number,
// integer or boolean, as MCP's elicitation allows).
type Question struct {
	// Message is the question, at most [schema.MaxQuestionMessageBytes]
	// bytes of UTF-8.
	Message string
	// Schema is the schema of the answer's content, such as
	// {"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}.
	Schema json.RawMessage
}

// Ask asks the caller of the call that ctx belongs to a question and
// waits for the answer (PROTOCOL.md, rule 11). It returns the content of
// an accepting answer, a JSON object that fits q.Schema (checked again
// here); [ErrDeclined] when the caller declined the question;
// [ErrAskCanceled] when it was dismissed without a choice; and an error
// wrapping ctx's when the call's deadline passes or it is canceled first.
//
// Only a call whose caller can answer can be asked: a job's call over the
// bus (a job, an A2A task, an MCP session that can elicit) carries the
// header that says so. A synchronous call, a notification, a call run by
// [Runtime.Invoke] or [Runtime.TryInvoke] cannot, and Ask fails at once
// with [ErrCannotAsk]; a handler that returns that error is answered
// -32000 with data.reason "cannot_ask" and a message that says to run the
// tool as a job. A question that breaks the rules of rule 11 fails at
// once, before anything is sent, with an error wrapping
// [schema.ErrBadQuestion] that names the member.
//
// While Ask waits the call holds its concurrency slot, its heartbeats go
// on, and the question is sent again now and then, in case it or its
// answer was lost. A call asks one question at a time: Ask called again
// while a question of the same call waits (from another goroutine) waits
// its turn. A tool that may ask declares it with [Asks], so that front
// doors know to run it where it can be answered.
func Ask(ctx context.Context, q Question) (json.RawMessage, error) {
	a, _ := ctx.Value(askerKey{}).(*asker)
	if a == nil {
		return nil, ErrCannotAsk
	}
	return a.ask(ctx, q)
}

type askerKey struct{}

// asker lets the handler of one call ask its caller (rule 11).
type asker struct {
	nc *nats.Conn
	// inbox is the runtime's inbox prefix, under which answers come.
	inbox string
	key   schema.AskKey
	hb    *beat
	// dropped is called for each message on an answer subject that is
	// not the answer: one that does not open with key, or names another
	// question.
	dropped func()
	// turn holds a token while a question waits: one at a time.
	turn chan struct{}
}

func (a *asker) ask(ctx context.Context, q Question) (json.RawMessage, error) {
	sq := schema.Question{ID: bus.ReplyToken(), Message: q.Message, Schema: q.Schema}
	body, err := schema.MarshalQuestion(sq)
	if err != nil {
		return nil, fmt.Errorf("worker: ask: %w", err)
	}
	select {
	case a.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("worker: ask: the call ended before its question could be asked: %w", ctx.Err())
	}
	defer func() { <-a.turn }()

	// The answer subject is subscribed before the question leaves, so
	// that the answer cannot come first.
	subject := schema.AnswerSubject(a.inbox, bus.ReplyToken())
	answers := make(chan schema.Answer, 1)
	sub, err := a.nc.Subscribe(subject, func(m *nats.Msg) {
		ans, err := schema.OpenAnswer(a.key, subject, m.Data)
		if err != nil || ans.ID != sq.ID {
			a.dropped()
			return
		}
		select {
		case answers <- ans:
		default: // the question has its answer already
		}
	})
	if err != nil {
		return nil, fmt.Errorf("worker: ask: subscribe to the answer subject %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	// When the call sends no progress message any more, nobody listens
	// for it, and its context is about to end: the wait below sees it.
	a.hb.ask(subject, body)
	defer a.hb.settle()

	select {
	case ans := <-answers:
		switch ans.Action {
		case schema.AskDecline:
			return nil, ErrDeclined
		case schema.AskCancel:
			return nil, ErrAskCanceled
		}
		if err := schema.CheckAnswerContent(q.Schema, ans.Content); err != nil {
			return nil, fmt.Errorf("worker: ask: the answer does not fit the question's schema: %w", err)
		}
		return ans.Content, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("worker: ask: no answer before the call ended: %w", ctx.Err())
	}
}

// askerFor returns what lets the handler of the call msg ask its caller,
// or nil when the call cannot be asked: it carries no
// [schema.HeaderAskKey], or no heartbeat header (asking needs liveness,
// rule 8), or a key that is not one, or the runtime's connection has an
// inbox prefix that an aggregator does not answer under.
func (rt *Runtime) askerFor(ctx context.Context, r *route, msg *nats.Msg, req *Request, hb *beat) *asker {
	v := msg.Header.Get(schema.HeaderAskKey)
	if v == "" || hb == nil {
		return nil
	}
	key, err := schema.ParseAskKey(v)
	if err != nil {
		rt.logCall(ctx, slog.LevelWarn, "the call cannot be asked: its ask key is not one", req, "err", err)
		return nil
	}
	if rt.askInbox == "" {
		rt.logCall(ctx, slog.LevelWarn, "the call cannot be asked: answers come only under an inbox prefix that starts with _INBOX (set one with bus.WithInboxPrefix or --nats-inbox-prefix)", req)
		return nil
	}
	return &asker{nc: rt.nc, inbox: rt.askInbox, key: key, hb: hb, turn: make(chan struct{}, 1),
		dropped: func() {
			r.metrics.dropAnswer()
			rt.logCall(ctx, slog.LevelDebug, "dropped a message on an answer subject that is not the answer", req)
		}}
}

// askInbox returns the inbox prefix of nc's connection, under which the
// runtime's answers come, or "" when an aggregator would not publish an
// answer there ([schema.CheckAnswerSubject]).
func askInbox(nc *nats.Conn) string {
	inbox := nc.NewInbox()
	prefix := inbox[:max(strings.LastIndexByte(inbox, '.'), 0)]
	if schema.CheckAnswerSubject(schema.AnswerSubject(prefix, bus.ReplyToken())) != nil {
		return ""
	}
	return prefix
}

// withoutAskKey returns h without [schema.HeaderAskKey], so that the key
// never reaches the handler, which might pass headers on; h itself is
// left as it is.
func withoutAskKey(h nats.Header) nats.Header {
	c := make(nats.Header, len(h)-1)
	for k, v := range h {
		if k != schema.HeaderAskKey {
			c[k] = v
		}
	}
	return c
}
