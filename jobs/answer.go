package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// MaxAnswerMessageBytes bounds the message rpc.jobs.answer may carry (its
// JSON, as the history counts it): half of [MaxHistoryBytes], so that the
// question, which comes before it, stays in the history with it.
const MaxAnswerMessageBytes = MaxHistoryBytes / 2

// refusal is what a mutation of rpc.jobs.answer returns to refuse the
// answer with an error of its own.
type refusal struct{ e *schema.Error }

func (r *refusal) Error() string { return r.e.Message }

// answer serves rpc.jobs.answer: the job's own caller answers the question
// its tool waits on (rule 11 of PROTOCOL.md), or declines it. An accepting
// answer must fit the question's schema, else -32602 names the member as
// a JSON pointer into the params ("/answer/confirmed") and the job keeps
// waiting. The answer is written into the record, the question cleared
// and the job running again: the runner that holds the job, following
// its record, seals it and publishes it to the worker. A message the
// params carry joins the history after the question, as submit's does
// (see [MaxAnswerMessageBytes]).
func (s *Service) answer(ctx context.Context, call schema.Call) (*schema.JobRecord, *schema.Error) {
	var p struct {
		schema.JobAnswerParams
		// Message hides the embedded Message, so that the message is read
		// as submit's is, and a member of the wrong type is named by its
		// path (/message/id).
		Message *submitMessage `json:"message"`
	}
	if e := decodeParams(call.Params, &p); e != nil {
		return nil, e
	}
	now := time.Now().UTC()
	var said *schema.JobMessage
	if p.Message != nil {
		m, e := p.Message.message(now)
		if e != nil {
			return nil, e
		}
		if n := messageBytes(m); n > MaxAnswerMessageBytes {
			return nil, invalidParams("message", fmt.Sprintf("the message is %d bytes of JSON, more than the %d a job's history keeps of an answer's message; send a shorter message, or none",
				n, MaxAnswerMessageBytes))
		}
		said = &m
	}
	switch {
	case p.ID == "":
		return nil, invalidParams("id", "required")
	case !validID(p.ID):
		return nil, invalidParams("id", "not a job id")
	case p.Decline && len(p.Answer) != 0:
		return nil, invalidParams("answer", "give either an answer or decline: true, not both")
	case !p.Decline && len(p.Answer) == 0:
		return nil, invalidParams("answer", "required: give the answer, an object that fits the question's schema, or decline: true")
	}
	id := p.ID
	rec, err := s.st.update(ctx, id, func(r *stored) error {
		if r.Caller != call.Caller {
			return errNotFound
		}
		if r.State != schema.JobInputRequired || r.Question == nil {
			return &refusal{schema.NewError(schema.CodeInvalidParams,
				fmt.Sprintf("invalid params: id: job %s is %s and waits for no answer; answer a job while it is %s, with the question its record shows",
					id, r.State, schema.JobInputRequired),
				map[string]any{"field": "/id", "state": r.State})}
		}
		if p.Question != "" && p.Question != r.Question.ID {
			return &refusal{schema.NewError(schema.CodeInvalidParams,
				fmt.Sprintf("invalid params: question: job %s waits on question %s, not %s; answer the question its record shows", id, r.Question.ID, p.Question),
				map[string]any{"field": "/question", "question": r.Question.ID})}
		}
		if said != nil {
			if e := messageIDFree(r, said.ID); e != nil {
				return &refusal{e}
			}
		}
		a := schema.Answer{ID: r.Question.ID, Action: schema.AskDecline}
		if !p.Decline {
			if err := schema.CheckAnswerContent(r.Question.Schema, p.Answer); err != nil {
				return &refusal{answerRefused(err)}
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, p.Answer); err != nil {
				return &refusal{invalidParams("answer", "not JSON")}
			}
			a.Action, a.Content = schema.AskAccept, buf.Bytes()
		}
		r.Answer, r.Question, r.State = &a, nil, schema.JobRunning
		if said != nil {
			r.addMessage(*said)
		}
		return nil
	})
	var ref *refusal
	switch {
	case errors.As(err, &ref):
		return nil, ref.e
	case err != nil:
		return nil, storeError(id, err)
	}
	return rec.public(), nil
}

// answerRefused is the -32602 error of an answer that does not fit the
// question's schema, naming the member as a JSON pointer into the params.
func answerRefused(err error) *schema.Error {
	var fe *schema.FieldError
	if !errors.As(err, &fe) {
		return invalidParams("answer", err.Error())
	}
	return invalidParams("/answer"+fe.Field, "the answer does not fit the question's schema: "+fe.Problem)
}

// messageIDFree refuses, as -32602 naming /message/id, a message id that
// job r's history holds already, or one of the form of the ids the job
// gives its own messages ("<job id>-<n>"): every message of a history
// keeps an id of its own.
func messageIDFree(r *stored, id string) *schema.Error {
	if strings.HasPrefix(id, r.ID+"-") {
		return invalidParams("/message/id", fmt.Sprintf("%q has the form of the ids of the job's own messages (%s-<n>); give the message an id of its own", id, r.ID))
	}
	for _, m := range r.History {
		if m.ID == id {
			return invalidParams("/message/id", fmt.Sprintf("the job's history has a message %q already; give each message an id of its own", id))
		}
	}
	return nil
}
