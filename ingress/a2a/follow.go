package a2a

import (
	"context"
	"errors"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/schema"
)

// errStop is what a visit returns to stop following early.
var errStop = errors.New("a2a: stop following")

// follow calls visit with job id's record as it is now and then with each
// later version until the job is final, visit returns an error, ctx ends
// or the server closes; a visit that is slow skips versions, never the
// final one. The subscription is admitted for r's caller as any call, and
// counts against the caller's bound of subscriptions; another caller's job
// is not found. held, when not nil, is the release of the subscription
// r.Hold counted for it. It returns visit's error but for errStop, or the
// A2A error that stopped it.
func (s *Server) follow(ctx context.Context, r request, id string, held func(), visit func(rec *schema.JobRecord) error) error {
	first, stream, e := r.Subscribe(ctx, id, held)
	if e != nil {
		return a2aError(e)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.quit:
			cancel()
		case <-sctx.Done():
		}
	}()
	final, err := door.Follow(sctx, first, stream, func(rec *schema.JobRecord) (bool, error) {
		if err := visit(rec); err != nil {
			return true, err
		}
		return rec.State.Final(), nil
	})
	if errors.Is(err, door.ErrRecord) {
		return refuse(a2a.ErrInternalError, "the record of task %s cannot be read", id)
	}
	select {
	case <-s.quit:
		if err == nil && !final {
			return refuse(a2a.ErrServerError, "this ingress is shutting down; resubscribe to task %s on another", id)
		}
	default:
	}
	switch {
	case err != nil || final:
		return stopped(err)
	case ctx.Err() != nil:
		return refuse(a2a.ErrServerError, "the client stopped waiting; task %s goes on", id)
	}
	return refuse(a2a.ErrServerError, "stopped following task %s before it ended: its record is gone, or this ingress lost JetStream; "+
		"get the task, or resubscribe to it", id)
}

func stopped(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// stream yields the task of job id as it is now, with the last keep
// messages of its history (all of them when keep is nil), then its events
// until it is final or input-required (see [events]). A stream ends with
// a status update marked final, also when the task was final or
// input-required from the start. held is as for [Server.follow].
func (s *Server) stream(ctx context.Context, r request, id string, held func(), keep *int, yield func(a2a.Event, error) bool) {
	var prev *schema.JobRecord
	err := s.follow(ctx, r, id, held, func(cur *schema.JobRecord) error {
		var out []a2a.Event
		switch {
		case prev == nil && ends(cur.State):
			out = []a2a.Event{lastMessages(task(cur), keep), &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(cur.ID),
				ContextID: cur.ContextID, Status: status(cur), Final: true}}
		case prev == nil:
			out = []a2a.Event{lastMessages(task(cur), keep)}
		default:
			out = events(prev, cur)
		}
		prev = cur
		for _, ev := range out {
			if !yield(ev, nil) {
				return errStop
			}
		}
		if cur.State == schema.JobInputRequired {
			// The client answers with a follow-up message, and streams
			// the rest with it or with tasks/resubscribe.
			return errStop
		}
		return nil
	})
	if err != nil {
		yield(nil, err)
	}
}
