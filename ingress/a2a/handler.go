package a2a

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// OnSendMessage implements message/send: it submits the job the message
// asks for and answers with its task at once when the client asked for a
// non-blocking send ("blocking": false), and otherwise, an absent
// blocking included (as the SDK's server and client read it), when the
// task is final, input-required (its status message asks the question a
// follow-up message answers), or the call's deadline passes, whichever
// comes first. A message with the taskId of an input-required task
// answers its question and follows the task on in the same way. The
// task's history is cut to configuration.historyLength.
func (s *Server) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	r, err := requestOf(ctx)
	if err != nil {
		return nil, err
	}
	blocking := p.Config == nil || p.Config.Blocking == nil || *p.Config.Blocking
	var held func()
	if blocking {
		// Following the task counts a subscription: one past the
		// caller's bound is refused before the task exists.
		release, e := r.Hold()
		if e != nil {
			return nil, a2aError(e)
		}
		defer release()
		held = release
	}
	rec, err := s.submit(ctx, r, p)
	if err != nil {
		return nil, err
	}
	var keep *int
	if p.Config != nil {
		keep = p.Config.HistoryLength
	}
	if !blocking {
		// The record as stored holds the history; the one submit
		// returned does not.
		var cur schema.JobRecord
		if e := s.call(ctx, r, schema.MethodJobsGet, map[string]string{"id": rec.ID}, &cur); e == nil {
			rec = &cur
		}
		return lastMessages(task(rec), keep), nil
	}
	wait, cancel := context.WithTimeout(ctx, r.timeout(rec.Method))
	defer cancel()
	last := rec
	err = s.follow(wait, r, rec.ID, held, func(cur *schema.JobRecord) error {
		last = cur
		if cur.State == schema.JobInputRequired {
			return errStop
		}
		return nil
	})
	if err != nil && wait.Err() == nil {
		return nil, err
	}
	// At the deadline the task is answered as it is; the client polls it.
	return lastMessages(task(last), keep), nil
}

// OnSendMessageStream implements message/stream: it submits the job the
// message asks for and streams its task, then a status update for each
// change of state or progress, and for a completed task the artifact of
// its result, until the task is final.
func (s *Server) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		r, err := requestOf(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		// Streaming the task counts a subscription: one past the
		// caller's bound is refused before the task exists.
		release, e := r.Hold()
		if e != nil {
			yield(nil, a2aError(e))
			return
		}
		defer release()
		rec, err := s.submit(ctx, r, p)
		if err != nil {
			yield(nil, err)
			return
		}
		var keep *int
		if p.Config != nil {
			keep = p.Config.HistoryLength
		}
		s.stream(ctx, r, rec.ID, release, keep, yield)
	}
}

// OnResubscribeToTask implements tasks/resubscribe: the task as it is now,
// then its events as for message/stream. Any replica answers it.
func (s *Server) OnResubscribeToTask(ctx context.Context, id *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		r, err := requestOf(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		s.stream(ctx, r, string(id.ID), nil, nil, yield)
	}
}

// OnGetTask implements tasks/get with rpc.jobs.get: the task with the
// last historyLength messages of its history (all of them without it,
// none for 0).
func (s *Server) OnGetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	t, err := s.jobTask(ctx, schema.MethodJobsGet, q.ID)
	if err != nil {
		return nil, err
	}
	return lastMessages(t, q.HistoryLength), nil
}

// OnCancelTask implements tasks/cancel with rpc.jobs.cancel: a task that
// has completed or failed cannot be canceled (-32002, naming its state),
// and canceling a canceled task answers the task, as canceling twice is
// canceling once.
func (s *Server) OnCancelTask(ctx context.Context, id *a2a.TaskIDParams) (*a2a.Task, error) {
	return s.jobTask(ctx, schema.MethodJobsCancel, id.ID)
}

// jobTask calls method (rpc.jobs.get or cancel) for task id and returns
// the task of the record it answers.
func (s *Server) jobTask(ctx context.Context, method string, id a2a.TaskID) (*a2a.Task, error) {
	r, err := requestOf(ctx)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, refuse(a2a.ErrInvalidParams, "give the task's id")
	}
	var rec schema.JobRecord
	if e := s.call(ctx, r, method, map[string]string{"id": string(id)}, &rec); e != nil {
		switch {
		case e.Code == schema.CodeInvalidParams && reason(e) == schema.ReasonJobFinished:
			var d struct {
				State schema.JobState `json:"state"`
			}
			_ = json.Unmarshal(e.Data, &d)
			return nil, refuse(a2a.ErrTaskNotCancelable, "task %s is %s, and only a task that is submitted or working can be canceled",
				id, state(d.State))
		case e.Code == schema.CodeInvalidParams:
			// A malformed id names no job of this caller.
			return nil, refuse(a2a.ErrTaskNotFound, "task %s not found", id)
		}
		return nil, a2aError(e)
	}
	return task(&rec), nil
}

// OnGetExtendedAgentCard implements agent/getAuthenticatedExtendedCard:
// the card with the skills the caller may call.
func (s *Server) OnGetExtendedAgentCard(ctx context.Context) (*a2a.AgentCard, error) {
	r, err := requestOf(ctx)
	if err != nil {
		return nil, err
	}
	return s.agentCard(r.endpoint, r.mayCall), nil
}

// now is the time a record made by the front door itself is stamped with.
func now() time.Time { return time.Now().UTC() }
