package aggregator

import (
	"fmt"
	"sync/atomic"

	"github.com/toolbus/toolbus/schema"
)

// caps are the in-flight limits a call must pass before it runs: the
// aggregator's own ([WithMaxInFlight]), its caller's share
// ([WithCallerMaxInFlight]) and its method's ([WithMethodMaxInFlight]).
// It is safe for concurrent use.
type caps struct {
	global  limit
	callers *callerSlots
	methods map[string]*limit // read only once made
}

// limit counts what is held of at most max.
type limit struct {
	max int
	n   atomic.Int64
}

// take holds one, or reports false when max are held.
func (l *limit) take() bool {
	if l.n.Add(1) > int64(l.max) {
		l.n.Add(-1)
		return false
	}
	return true
}

// give returns one that take gave.
func (l *limit) give() { l.n.Add(-1) }

// newCaps returns the limits of a config.
func newCaps(cfg config) *caps {
	cs := &caps{global: limit{max: cfg.maxInFlight}, callers: newCallerSlots(callerShare(cfg)),
		methods: make(map[string]*limit, len(cfg.methodInFlight))}
	for m, n := range cfg.methodInFlight {
		cs.methods[m] = &limit{max: n}
	}
	return cs
}

// held is what a call took of the caps, given back when it is answered.
type held struct {
	caller string // the named caller holding a slot of its share; "" none
	global bool
	method *limit
}

// take holds a slot of every cap for c into h, or returns the refusal of
// the first cap c is over, holding nothing.
func (cs *caps) take(c *schema.Call, h *held) *schema.Error {
	if c.Caller != "" {
		if !cs.callers.take(c.Caller) {
			return callerOverloaded(cs.callers.max)
		}
		h.caller = c.Caller
	}
	if !cs.global.take() {
		cs.give(h)
		return schema.NewError(schema.CodeOverloaded,
			fmt.Sprintf("overloaded: %d calls in flight on this ingress (max_in_flight); send the call again shortly", cs.global.max),
			map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(), "limit": "max_in_flight", "max": cs.global.max})
	}
	h.global = true
	if l, ok := cs.methods[c.Method]; ok {
		if !l.take() {
			cs.give(h)
			return schema.NewError(schema.CodeOverloaded,
				fmt.Sprintf("overloaded: %d calls of %s in flight (method_max_in_flight)", l.max, c.Method),
				map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(),
					"limit": "method_max_in_flight", "method": c.Method})
		}
		h.method = l
	}
	return nil
}

// give returns what h holds, and empties it.
func (cs *caps) give(h *held) {
	if h.caller != "" {
		cs.callers.give(h.caller)
	}
	if h.global {
		cs.global.give()
	}
	if h.method != nil {
		h.method.give()
	}
	*h = held{}
}
