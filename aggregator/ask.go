package aggregator

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// Questions from tools (rule 11 of PROTOCOL.md): a call whose
// [schema.Call] Ask is set carries a fresh key in Toolbus-Ask-Key, only
// with heartbeats; its worker's questions come on the reply subject as
// progress messages, are checked and handed to Ask with a function that
// seals the answer with the key and publishes it on the question's answer
// subject. A call without Ask never comes here.

// asking is what a call whose caller can answer holds: the key that seals
// its answers and the connection they are published on.
type asking struct {
	key schema.AskKey
	nc  *nats.Conn
}

// allowAsk gives cl a fresh key, which its messages carry: the attempts
// of the call carry the same key, as they are one call.
func (a *Aggregator) allowAsk(cl *call) {
	cl.ask = &asking{key: schema.NewAskKey(), nc: a.nc}
}

// answerer returns the function that answers a question whose answer
// subject is subject, which [schema.CheckAnswerSubject] passed.
func (s *asking) answerer(subject string) func(schema.Answer) error {
	return func(ans schema.Answer) error {
		body, err := schema.SealAnswer(s.key, subject, ans)
		if err != nil {
			return err
		}
		if err := s.nc.Publish(subject, body); err != nil {
			return fmt.Errorf("aggregator: publish the answer to question %s: %w", ans.ID, err)
		}
		return nil
	}
}

// questioned hands the question m carries to cl's Ask. A question to a
// call that did not allow one, or whose answer subject is not one an
// aggregator may publish on, is dropped; one that breaks the rules
// otherwise is answered cancel at once, so that its tool does not wait to
// its deadline. The table's lock is held: Ask must not block.
func (t *table) questioned(cl *call, m *nats.Msg) {
	if cl.ask == nil || cl.c.Ask == nil {
		t.questionsCannotAsk.Add(1)
		t.log.Debug("dropped a question to a call that cannot be asked", "method", cl.method)
		return
	}
	subject := m.Header.Get(schema.HeaderAskReply)
	if err := schema.CheckAnswerSubject(subject); err != nil {
		t.questionsAnswerSubject.Add(1)
		t.log.Warn("dropped a question whose answer subject is refused", "method", cl.method, "err", err)
		return
	}
	answer := cl.ask.answerer(subject)
	q, err := schema.UnmarshalQuestion(m.Data)
	if err != nil {
		t.questionsInvalid.Add(1)
		t.log.Warn("dropped a question that breaks rule 11", "method", cl.method, "err", err)
		var named struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m.Data, &named) == nil && schema.ValidQuestionID(named.ID) {
			if err := answer(schema.Answer{ID: named.ID, Action: schema.AskCancel}); err != nil {
				t.log.Debug("cancel answer not published", "method", cl.method, "err", err)
			}
		}
		return
	}
	cl.c.Ask(q, answer)
}

// QuestionsDropped counts the questions of tools (rule 11 of
// PROTOCOL.md) that reached an aggregator's calls and were dropped, by
// why. Each one comes from a worker that does not follow the rule, or
// from someone publishing on reply subjects it was given.
type QuestionsDropped struct {
	// CannotAsk came to a call whose caller cannot answer: the call
	// carried no Toolbus-Ask-Key, so its worker had no business asking.
	CannotAsk uint64
	// AnswerSubject named an answer subject an aggregator may not
	// publish on ([schema.CheckAnswerSubject]): nothing was published.
	AnswerSubject uint64
	// Invalid broke rule 11 otherwise (its body, its schema, a bound):
	// it was answered cancel when it named its id, so that its tool need
	// not wait to its deadline.
	Invalid uint64
}

// QuestionsDropped returns how many questions the aggregator dropped
// since it was made.
func (a *Aggregator) QuestionsDropped() QuestionsDropped {
	t := a.table
	return QuestionsDropped{CannotAsk: t.questionsCannotAsk.Load(), AnswerSubject: t.questionsAnswerSubject.Load(),
		Invalid: t.questionsInvalid.Load()}
}

// questionCounters are the counts of [Aggregator.QuestionsDropped],
// kept by the table.
type questionCounters struct {
	questionsCannotAsk, questionsAnswerSubject, questionsInvalid atomic.Uint64
}
