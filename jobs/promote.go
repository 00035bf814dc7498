package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// promoteCacheTTL is how long [Service.Promotable] trusts its list of the
// methods that runners serve; a runner that starts is promotable after at
// most this long.
const promoteCacheTTL = 2 * time.Second

// servedFilters caches the filter subjects of the runners' consumers.
type servedFilters struct {
	mu      sync.Mutex
	filters []string
	expires time.Time
}

// Promotable reports whether a call of method can go on as a job: some
// ingress runs a [Runner] whose consumer takes the method's jobs, and the
// method check ([WithMethodCheck]), if any, would accept its submit with no
// worker to wait for. A call of a method no worker serves is then answered
// as a call (-32601 or -32003) rather than turned into a job that waits.
// The answer may be up to two seconds old; when JetStream cannot be asked
// it is false.
func (s *Service) Promotable(ctx context.Context, method string) bool {
	filters, err := s.filters(ctx)
	if err != nil {
		s.log.Debug("cannot list job consumers", "err", err)
		return false
	}
	subject := s.st.names.runSubject(method)
	for _, f := range filters {
		// A consumer's filter is a subject with NATS's wildcards, which
		// are the method patterns' own.
		if schema.MatchMethod(f, subject) {
			return s.cfg.checkMethod == nil || runsNow(ctx, s.cfg.checkMethod, method)
		}
	}
	return false
}

// runsNow reports whether check accepts a job of method that need not wait
// for a worker.
func runsNow(ctx context.Context, check MethodCheck, method string) bool {
	waiting, e := check(ctx, method, nil)
	return e == nil && waiting == ""
}

func (s *Service) filters(ctx context.Context) ([]string, error) {
	s.served.mu.Lock()
	defer s.served.mu.Unlock()
	if time.Now().Before(s.served.expires) {
		return s.served.filters, nil
	}
	var filters []string
	lister := s.st.stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Config.FilterSubject != "" {
			filters = append(filters, info.Config.FilterSubject)
		}
		filters = append(filters, info.Config.FilterSubjects...)
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	s.served.filters, s.served.expires = filters, time.Now().Add(promoteCacheTTL)
	return filters, nil
}

// RunAsJob runs a call as a job and waits for it at most timeout, for a
// client that sent Prefer: respond-async. A job that ends in time is
// answered as the call would have been: its result, or its error. One that
// does not is answered [schema.CodeTimeout] whose data carries the job's id
// under job_id: the job keeps running, and the client polls rpc.jobs.get
// instead of calling again. The job belongs to call.Caller.
func (s *Service) RunAsJob(ctx context.Context, call schema.Call, timeout time.Duration) (json.RawMessage, *schema.Error) {
	params, err := json.Marshal(struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params,omitempty"`
	}{call.Method, call.Params})
	if err != nil {
		return nil, schema.NewError(schema.CodeInternal, "internal error: "+err.Error(), nil)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sub, rpcErr := s.submit(ctx, schema.Call{Request: schema.Request{Method: schema.MethodJobsSubmit, Params: params}, Caller: call.Caller, TraceParent: call.TraceParent})
	if rpcErr != nil {
		return nil, rpcErr
	}
	rec, err := s.awaitFinal(ctx, sub.ID)
	switch {
	case rec != nil && rec.State == schema.JobSucceeded:
		return rec.Result, nil
	case rec != nil && rec.Error != nil:
		return nil, rec.Error
	case rec != nil:
		return nil, canceledError()
	}
	state := schema.JobQueued
	if cur, _, gerr := s.st.get(context.WithoutCancel(ctx), sub.ID); gerr == nil {
		state = cur.State
	}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		return nil, schema.NewError(schema.CodeCanceled, "canceled: the request ended; the call goes on as job "+sub.ID,
			map[string]any{"job_id": sub.ID, "state": state})
	}
	msg := fmt.Sprintf("timed out: %s did not answer within %v; it goes on as job %s (poll rpc.jobs.get)", call.Method, timeout, sub.ID)
	data := map[string]any{"retryable": false, "job_id": sub.ID, "state": state, "timeout_ms": timeout.Milliseconds(), "method": call.Method}
	if err != nil && ctx.Err() == nil {
		data["watch_error"] = err.Error()
	}
	return nil, schema.NewError(schema.CodeTimeout, msg, data)
}

// awaitFinal follows a job's record until it reaches a final state or ctx
// ends, and returns the final record (nil when ctx ended first). It reads
// from the service's one watch of the records ([hub]).
func (s *Service) awaitFinal(ctx context.Context, id string) (*schema.JobRecord, error) {
	f, err := s.hub.follow(ctx, id)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r, ok := <-f.records():
			if !ok {
				return nil, fmt.Errorf("jobs: stopped following job %s: %w", id, f.err())
			}
			if r.State.Final() {
				return r.public(), nil
			}
		}
	}
}
