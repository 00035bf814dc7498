package aggregator

import (
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/schema"
)

// WithCallerMaxInFlight caps the calls one caller has in flight on this
// aggregator (default: half of [WithMaxInFlight], at least 1). A call over
// it is refused at once with [schema.CodeOverloaded], retry_after_ms and
// limit "caller_max_in_flight", while other callers' calls go on.
//
// The share is fixed rather than computed from the callers active at the
// moment: a share that shrinks when a second caller arrives cannot take
// back the slots the first already holds, so the newcomer would still be
// refused until the first's calls end. A fixed share leaves the rest of
// the global cap to the others from the start, whoever came first.
//
// The empty caller, under which an ingress without authentication sends
// every call, is held to the global cap alone: with nobody to tell apart,
// its share is the whole.
func WithCallerMaxInFlight(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("aggregator: caller max in-flight must be positive, got %d", n)
		}
		c.callerMaxInFlight = n
		return nil
	}
}

// callerSlots counts the calls each named caller has in flight. It is safe
// for concurrent use; a caller with nothing in flight takes no memory.
type callerSlots struct {
	max int

	mu   sync.Mutex
	held map[string]int
}

func newCallerSlots(max int) *callerSlots {
	return &callerSlots{max: max, held: map[string]int{}}
}

// take gives caller a slot, or reports false when it holds its share.
func (s *callerSlots) take(caller string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[caller] >= s.max {
		return false
	}
	s.held[caller]++
	return true
}

// give returns a slot that take gave.
func (s *callerSlots) give(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[caller] - 1; n > 0 {
		s.held[caller] = n
	} else {
		delete(s.held, caller)
	}
}

// callerOverloaded is the refusal of a call whose caller holds its share.
func callerOverloaded(max int) *schema.Error {
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: this caller already has %d calls in flight on this ingress, its share (caller_max_in_flight); "+
			"wait for some to be answered, or send fewer at once", max),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(),
			"limit": "caller_max_in_flight", "max": max})
}

// CallerMaxInFlight returns the calls one named caller may have in flight.
func (a *Aggregator) CallerMaxInFlight() int { return a.callers.max }
