package aggregator

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/toolbus/toolbus/schema"
)

// Defaults of [Breaker].
const (
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 10 * time.Second
	DefaultBreakerTrials   = 1
	// maxBreakers bounds the methods with a breaker; calls of further
	// methods go unguarded rather than grow the map without end.
	maxBreakers = 10000
)

// Breaker configures the circuit breaker that every method gets with
// [WithBreaker]. A zero field takes its default.
type Breaker struct {
	// Failures is how many failures in a row open the circuit (default
	// [DefaultBreakerFailures]). A failure is an answer that says the
	// method's workers are in trouble: a timeout (-32001), unavailability
	// (-32003, such as a lost worker) or an internal error (-32603). A
	// tool's own error is an answer, and counts as a success.
	Failures int
	// OpenFor is how long an open circuit refuses calls before it lets
	// trial calls through (default [DefaultBreakerOpenFor]).
	OpenFor time.Duration
	// Trials is how many trial calls a half-open circuit lets through;
	// all must succeed to close it (default [DefaultBreakerTrials]).
	Trials int
}

// WithBreaker gives every method a circuit breaker (default: none). While a
// method's circuit is open its calls are answered -32003 at once, with
// data.reason "circuit_open" and retry_after_ms, and never published; after
// b.OpenFor, trial calls go through, and the circuit closes when they
// succeed or opens again when one fails.
func WithBreaker(b Breaker) Option {
	return func(c *config) error {
		if b.Failures < 0 || b.OpenFor < 0 || b.Trials < 0 {
			return fmt.Errorf("aggregator: breaker settings must not be negative, got %+v", b)
		}
		if b.Failures == 0 {
			b.Failures = DefaultBreakerFailures
		}
		if b.OpenFor == 0 {
			b.OpenFor = DefaultBreakerOpenFor
		}
		if b.Trials == 0 {
			b.Trials = DefaultBreakerTrials
		}
		c.breaker = &b
		return nil
	}
}

// breakers holds one circuit breaker per method. It is safe for concurrent
// use.
type breakers struct {
	cfg Breaker

	mu sync.Mutex
	by map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]
}

// errTrouble is what the breaker counts as a failure.
var errTrouble = errors.New("aggregator: method in trouble")

func (b *breakers) get(method string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	b.mu.Lock()
	defer b.mu.Unlock()
	cb, ok := b.by[method]
	if ok || len(b.by) >= maxBreakers {
		return cb
	}
	failures := uint32(b.cfg.Failures)
	cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        method,
		MaxRequests: uint32(b.cfg.Trials),
		Timeout:     b.cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
	})
	b.by[method] = cb
	return cb
}

// allow asks the breaker of method whether a call may go: it returns the
// refusal of an open circuit, or done, to be called once with the call's
// error (nil for a result) when it is answered; done is nil for a method
// no breaker watches (past [maxBreakers]). The aggregator asks only when
// breakers are on ([WithBreaker]): with them off, a call never reaches
// this file.
func (b *breakers) allow(method string) (done func(*schema.Error), refused *schema.Error) {
	cb := b.get(method)
	if cb == nil {
		return nil, nil
	}
	report, err := cb.Allow()
	if err != nil {
		return nil, schema.NewError(schema.CodeUnavailable,
			"unavailable: "+method+" keeps failing; its circuit is open",
			map[string]any{"retryable": true, "reason": schema.ReasonCircuitOpen, "method": method,
				"retry_after_ms": b.cfg.OpenFor.Milliseconds()})
	}
	return func(rpcErr *schema.Error) {
		if rpcErr != nil && (rpcErr.Code == schema.CodeTimeout || rpcErr.Code == schema.CodeUnavailable || rpcErr.Code == schema.CodeInternal) {
			report(errTrouble)
			return
		}
		// A result, a tool's own error, or an answer that says nothing of
		// the method's health (overload, cancellation).
		report(nil)
	}, nil
}

// WithHedge turns hedged requests on for retry-safe methods
// ([WithRetrySafe]): a call with no reply after delay is published a
// second time, and the first reply of either answers it (default off).
// The hedge counts as an attempt of [WithMaxAttempts]. Hedging trades
// load for tail latency: keep delay near the method's usual slow
// percentile.
func WithHedge(delay time.Duration) Option {
	return func(c *config) error {
		if delay < 0 {
			return fmt.Errorf("aggregator: hedge delay must not be negative, got %v", delay)
		}
		c.hedge = delay
		return nil
	}
}
