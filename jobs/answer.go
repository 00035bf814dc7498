package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/schema"
)

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
// its record, seals it and publishes it to the worker.
func (s *Service) answer(ctx context.Context, call schema.Call) (*schema.JobRecord, *schema.Error) {
	var p schema.JobAnswerParams
	if e := decodeParams(call.Params, &p); e != nil {
		return nil, e
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
