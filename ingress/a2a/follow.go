package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// errStop is what a visit returns to stop following early.
var errStop = errors.New("a2a: stop following")

// follow calls visit with job id's record as it is now and then with each
// later version until the job is final, visit returns an error, ctx ends
// or the server closes. The subscription is admitted for r's caller as
// any call; another caller's job is not found. When the subscription ends
// before a final record (the replica's watch was lost), the record is read
// once more. It returns visit's error but for errStop, or the A2A error
// that stopped it.
func (s *Server) follow(ctx context.Context, r Request, id string, visit func(rec *schema.JobRecord) error) error {
	first, stream, e := r.Subscribe(ctx, id)
	if e != nil {
		return a2aError(e)
	}
	var rec schema.JobRecord
	if err := json.Unmarshal(first, &rec); err != nil {
		return fmt.Errorf("the record of task %s cannot be read: %w", id, a2a.ErrInternalError)
	}
	if err := visit(&rec); err != nil || rec.State.Final() {
		return stopped(err)
	}
	streamCtx, stop := context.WithCancel(ctx)
	records := make(chan json.RawMessage, 16)
	go func() {
		defer close(records)
		stream(streamCtx, func(_ string, params json.RawMessage) {
			select {
			case records <- params:
			case <-streamCtx.Done():
			}
		})
	}()
	defer func() {
		stop()
		for range records { // wait for the stream to end
		}
	}()
	for {
		var raw json.RawMessage
		var ok bool
		select {
		case raw, ok = <-records:
		case <-ctx.Done():
			return fmt.Errorf("the client stopped waiting; task %s goes on: %w", id, a2a.ErrServerError)
		case <-s.quit:
			return fmt.Errorf("this ingress is shutting down; resubscribe to task %s on another: %w", id, a2a.ErrServerError)
		}
		if !ok {
			var end schema.JobRecord
			if e := s.call(ctx, r, schema.MethodJobsGet, map[string]string{"id": id}, &end); e != nil {
				return a2aError(e)
			}
			if !end.State.Final() {
				return fmt.Errorf("lost track of task %s; resubscribe to follow it again: %w", id, a2a.ErrServerError)
			}
			return stopped(visit(&end))
		}
		var cur schema.JobRecord
		if err := json.Unmarshal(raw, &cur); err != nil {
			return fmt.Errorf("the record of task %s cannot be read: %w", id, a2a.ErrInternalError)
		}
		if err := visit(&cur); err != nil || cur.State.Final() {
			return stopped(err)
		}
	}
}

func stopped(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// stream yields the task of job id as it is now, then its events until it
// is final (see [events]).
func (s *Server) stream(ctx context.Context, r Request, id string, yield func(a2a.Event, error) bool) {
	var prev *schema.JobRecord
	err := s.follow(ctx, r, id, func(cur *schema.JobRecord) error {
		var out []a2a.Event
		if prev == nil {
			out = []a2a.Event{task(cur)}
		} else {
			out = events(prev, cur)
		}
		prev = cur
		for _, ev := range out {
			if !yield(ev, nil) {
				return errStop
			}
		}
		return nil
	})
	if err != nil {
		yield(nil, err)
	}
}
