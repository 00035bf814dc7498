package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/schema"
)

// Defaults of the bounds of subscriptions (see [WithMaxSubscriptions]).
const (
	// DefaultMaxSubscriptions is the most subscriptions one service has
	// open over all callers (max_subscriptions), which is also the
	// anonymous caller's share.
	DefaultMaxSubscriptions = 10_000
	// DefaultCallerMaxSubscriptions is the most one named caller has open
	// (caller_max_subscriptions).
	DefaultCallerMaxSubscriptions = 64
)

// subscriptionRetryAfterMS is the wait suggested to a caller at its bound
// of subscriptions: about the time a job takes to end one.
const subscriptionRetryAfterMS = 1000

// WithMaxSubscriptions bounds the subscriptions open at once ([Service.Subscribe]):
// max over all callers (default [DefaultMaxSubscriptions]), callerMax for
// each named caller (default [DefaultCallerMaxSubscriptions]; at most max).
// Every front door that follows a job subscribes: rpc.jobs.subscribe over
// a WebSocket, an A2A stream or blocking message/send, an MCP tools/call
// with progress. A subscription past a bound is refused -32002 (retryable,
// retry_after_ms, limit caller_max_subscriptions or max_subscriptions),
// while other callers' go on. Without authentication every subscription is
// the one anonymous caller's, whose share is max. All subscriptions share
// one watch of the records, so the bound is of the ingress's memory, not
// of JetStream's consumers.
func WithMaxSubscriptions(max, callerMax int) Option {
	return func(c *config) error {
		if max < 1 || callerMax < 1 {
			return fmt.Errorf("jobs: max subscriptions and caller max subscriptions must be at least 1, got %d and %d", max, callerMax)
		}
		c.maxSubs, c.callerMaxSubs = max, min(callerMax, max)
		return nil
	}
}

// subscriptions counts the subscriptions open, per caller and in all. It
// is safe for concurrent use; a caller with none open takes no memory.
type subscriptions struct {
	max, callerMax int

	mu    sync.Mutex
	total int
	open  map[string]int
}

func newSubscriptions(max, callerMax int) *subscriptions {
	return &subscriptions{max: max, callerMax: callerMax, open: map[string]int{}}
}

// take counts a new subscription of caller, or returns its refusal.
func (s *subscriptions) take(caller string) *schema.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit, name := s.callerMax, "caller_max_subscriptions"
	if caller == "" {
		limit, name = s.max, "max_subscriptions"
	}
	if s.open[caller] < limit && s.total >= s.max {
		limit, name = s.max, "max_subscriptions"
	}
	if s.open[caller] >= limit || s.total >= s.max {
		return schema.NewError(schema.CodeOverloaded,
			fmt.Sprintf("overloaded: %d subscriptions to jobs are open on this ingress (%s), counting WebSocket subscriptions, "+
				"A2A streams and blocking sends and MCP calls with progress; end some, or poll rpc.jobs.get instead", limit, name),
			map[string]any{"retryable": true, "retry_after_ms": subscriptionRetryAfterMS, "limit": name, "max": limit})
	}
	s.open[caller]++
	s.total++
	return nil
}

// give returns a subscription that take counted.
func (s *subscriptions) give(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if n := s.open[caller] - 1; n > 0 {
		s.open[caller] = n
	} else {
		delete(s.open, caller)
	}
}

// Subscribe answers rpc.jobs.subscribe {"id"} with the job's record as it
// is now and returns stream, which calls notify with every later version of
// the record until the job ends (its final record is the last), the record
// expires, or ctx ends; a notify that is slow skips versions, never the
// final one. A transport that keeps a connection open runs stream on a
// goroutine bounded by the connection. Unknown ids and other callers'
// jobs are [schema.ErrJobNotFound].
//
// The subscription counts against its caller's bound
// ([WithMaxSubscriptions]) from Subscribe until stream returns, or until
// Subscribe's ctx ends when stream is never run; it reads from the
// service's one watch of the records, so it holds no JetStream consumer of
// its own.
func (s *Service) Subscribe(ctx context.Context, call schema.Call) (json.RawMessage, func(context.Context, func(method string, params json.RawMessage)), *schema.Error) {
	if _, e := jobID(call); e != nil {
		return nil, nil, e
	}
	release, e := s.HoldSubscription(call.Caller)
	if e != nil {
		return nil, nil, e
	}
	return s.SubscribeHeld(ctx, call, release)
}

// HoldSubscription counts a subscription of caller against its bound
// ([WithMaxSubscriptions]) before the job it will follow exists, or
// returns the refusal a subscription would get. A front door that
// submits a job and then follows it (an A2A stream or blocking send, an
// MCP call with progress) holds first, so that a caller at its bound is
// refused before its job is created, never with a job that runs anyway.
// release gives the subscription back; calling it again does nothing.
// Hand it to [Service.SubscribeHeld], which calls it when the
// subscription ends.
func (s *Service) HoldSubscription(caller string) (release func(), e *schema.Error) {
	if e := s.subs.take(caller); e != nil {
		return nil, e
	}
	var once sync.Once
	return func() { once.Do(func() { s.subs.give(caller) }) }, nil
}

// SubscribeHeld is [Service.Subscribe] for a subscription that
// [Service.HoldSubscription] counted already: release, which it calls
// when the subscription ends or is refused, gives it back.
func (s *Service) SubscribeHeld(ctx context.Context, call schema.Call, release func()) (json.RawMessage, func(context.Context, func(method string, params json.RawMessage)), *schema.Error) {
	id, e := jobID(call)
	if e != nil {
		release()
		return nil, nil, e
	}
	f, err := s.hub.follow(ctx, id)
	if err != nil {
		release()
		return nil, nil, storeError(id, err)
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			f.stop()
			release()
		})
	}
	rec := <-f.records()
	if rec == nil || rec.Caller != call.Caller {
		end()
		return nil, nil, notFound(id)
	}
	result, err := json.Marshal(rec.public())
	if err != nil {
		end()
		return nil, nil, schema.NewError(schema.CodeInternal, "internal error: encode record: "+err.Error(), nil)
	}
	if rec.State.Final() {
		end()
		return result, func(context.Context, func(string, json.RawMessage)) {}, nil
	}
	unbind := context.AfterFunc(ctx, end)
	stream := func(ctx context.Context, notify func(string, json.RawMessage)) {
		defer unbind()
		defer end()
		for {
			select {
			case <-ctx.Done():
				return
			case r, ok := <-f.records():
				if !ok {
					if err := f.err(); err != nil && !errors.Is(err, errStopped) {
						s.log.Debug("a subscription ended before its job", "id", id, "err", err)
					}
					return
				}
				b, err := json.Marshal(r.public())
				if err != nil {
					s.log.Warn("cannot encode a job record", "id", id, "err", err)
					return
				}
				notify(schema.MethodJobsProgress, b)
			}
		}
	}
	return result, stream, nil
}
