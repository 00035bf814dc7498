package jobs

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/schema"
)

// Subscribe answers rpc.jobs.subscribe {"id"} with the job's record as it
// is now and returns stream, which calls notify with every later version of
// the record until the job ends (its final record is the last), the record
// expires, or ctx ends. A transport that keeps a connection open runs
// stream on a goroutine bounded by the connection. Unknown ids and other
// callers' jobs are [schema.ErrJobNotFound].
func (s *Service) Subscribe(ctx context.Context, call schema.Call) (json.RawMessage, func(context.Context, func(method string, params json.RawMessage)), *schema.Error) {
	id, e := jobID(call)
	if e != nil {
		return nil, nil, e
	}
	rec, rev, err := s.st.get(ctx, id)
	if err != nil {
		return nil, nil, storeError(id, err)
	}
	if rec.Caller != call.Caller {
		return nil, nil, notFound(id)
	}
	result, err := json.Marshal(rec.public())
	if err != nil {
		return nil, nil, schema.NewError(schema.CodeInternal, "internal error: encode record: "+err.Error(), nil)
	}
	if rec.State.Final() {
		return result, func(context.Context, func(string, json.RawMessage)) {}, nil
	}
	stream := func(ctx context.Context, notify func(string, json.RawMessage)) {
		w, err := s.st.kv.Watch(ctx, jobKey(id))
		if err != nil {
			s.log.Warn("cannot watch a job", "id", id, "err", err)
			return
		}
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case entry, ok := <-w.Updates():
				if !ok {
					return
				}
				// The first entries replay what the subscriber has
				// already been answered with.
				if entry == nil || entry.Revision() <= rev {
					continue
				}
				if entry.Operation() != jetstream.KeyValuePut {
					return // expired or deleted
				}
				var r stored
				if err := json.Unmarshal(entry.Value(), &r); err != nil {
					s.log.Warn("cannot decode a job record", "id", id, "err", err)
					return
				}
				b, err := json.Marshal(r.public())
				if err != nil {
					return
				}
				notify(schema.MethodJobsProgress, b)
				if r.State.Final() {
					return
				}
			}
		}
	}
	return result, stream, nil
}
