package ingress

import (
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/schema"
)

// DefaultMaxBytesInFlight bounds the bytes of answers the ingress holds
// for its clients, received from the workers and not written yet
// (max_bytes_in_flight). Each named caller may hold half of it by default
// ([WithCallerMaxBytesInFlight]).
const DefaultMaxBytesInFlight int64 = 512 << 20

// WithMaxBytesInFlight bounds the bytes of answers the ingress holds, over
// all callers, between their arrival from the dispatcher and their write
// to the client (default [DefaultMaxBytesInFlight]). See
// [WithCallerMaxBytesInFlight] for what happens at the bound.
func WithMaxBytesInFlight(n int64) Option {
	return func(c *config) error {
		if n < 1<<20 {
			return fmt.Errorf("ingress: max bytes in flight must be at least 1 MiB, got %d", n)
		}
		c.maxBytes = n
		return nil
	}
}

// WithCallerMaxBytesInFlight bounds the bytes of answers the ingress holds
// for one named caller (default: half of [WithMaxBytesInFlight]). A caller
// holding half its bound or more has its new calls refused -32002
// (retryable, retry_after_ms, limit caller_max_bytes_in_flight) until its
// answers are written, which leaves the other half for the answers of the
// calls it has running; an answer that arrives and does not fit all the
// same is dropped and answered in its place -32002 with may_have_run true,
// since the call ran. Without authentication every call is the one anonymous caller's,
// whose share is the whole of [WithMaxBytesInFlight], under the limit
// max_bytes_in_flight.
//
// An answer is held from its arrival until its transport wrote it with
// the rest of its message: the request's whole answer for POST /rpc, REST
// and event streams, each message for a WebSocket (whose connection has a
// bound of its own, see [WithWebSocketMaxUnsentBytes]), and an MCP answer
// until it is handed to the MCP session.
func WithCallerMaxBytesInFlight(n int64) Option {
	return func(c *config) error {
		if n < 1<<10 {
			return fmt.Errorf("ingress: caller max bytes in flight must be at least 1 KiB, got %d", n)
		}
		c.callerMaxBytes = n
		return nil
	}
}

// byteBudget counts the bytes of answers held per caller and in all. It is
// safe for concurrent use; a caller holding nothing takes no memory.
type byteBudget struct {
	max       int64 // over all callers, and the anonymous caller's share
	callerMax int64 // a named caller's share

	mu    sync.Mutex
	total int64
	held  map[string]int64
}

func newByteBudget(max, callerMax int64) *byteBudget {
	if callerMax <= 0 {
		callerMax = max / 2
	}
	return &byteBudget{max: max, callerMax: min(callerMax, max), held: map[string]int64{}}
}

// limit returns the bound of caller and its name.
func (b *byteBudget) limit(caller string) (int64, string) {
	if caller == "" {
		return b.max, "max_bytes_in_flight"
	}
	return b.callerMax, "caller_max_bytes_in_flight"
}

// admit returns the refusal of a new call of caller while it holds half
// its bound of bytes or more, or while the ingress holds all but that much
// of its own; nil otherwise. The half left is room for the answers of the
// calls already running, which would otherwise be dropped on arrival; and
// as a named caller's bound is below the ingress's by more than that, one
// caller alone never closes the ingress to the others.
func (b *byteBudget) admit(caller string) *schema.Error {
	max, name := b.limit(caller)
	b.mu.Lock()
	full := b.held[caller] >= max/2
	if !full && b.total >= b.max-max/2 {
		full, max, name = true, b.max, "max_bytes_in_flight"
	}
	b.mu.Unlock()
	if !full {
		return nil
	}
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: %d bytes of answers are waiting to be written (%s); "+
			"read the answers of earlier calls before sending more", max, name),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfterMS, "limit": name, "max": max})
}

// overloadRetryAfterMS is the wait suggested to a caller whose answers
// wait to be written: about the time a client takes to read some.
const overloadRetryAfterMS = 100

// take adds n bytes to caller's, or returns the answer that replaces one
// of n bytes that does not fit.
func (b *byteBudget) take(caller string, n int64) *schema.Error {
	max, name := b.limit(caller)
	b.mu.Lock()
	fits := b.held[caller]+n <= max
	if fits && b.total+n > b.max {
		fits, max, name = false, b.max, "max_bytes_in_flight"
	}
	if fits {
		b.held[caller] += n
		b.total += n
	}
	b.mu.Unlock()
	if fits {
		return nil
	}
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: the answer (%d bytes) would take the answers waiting to be written past %d bytes (%s), so it was dropped; "+
			"the call ran: read answers sooner or send fewer calls at once", n, max, name),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfterMS, "limit": name, "max": max,
			"got": n, "may_have_run": true})
}

func (b *byteBudget) free(caller string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if left := b.held[caller] - n; left > 0 {
		b.held[caller] = left
	} else {
		delete(b.held, caller)
	}
}

// Total returns the bytes held now, over all callers.
func (b *byteBudget) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// charge is what one message's answers hold of their caller's budget. It
// is safe for concurrent use. A nil charge holds nothing.
type charge struct {
	b      *byteBudget
	caller string

	mu   sync.Mutex
	held int64
}

func (b *byteBudget) open(caller string) *charge { return &charge{b: b, caller: caller} }

// hold charges r's bytes, or returns r replaced by the refusal when they
// do not fit.
func (ch *charge) hold(r schema.Response) schema.Response {
	if ch == nil {
		return r
	}
	n := answerSize(r)
	if e := ch.b.take(ch.caller, n); e != nil {
		return schema.Response{ID: r.ID, Error: e}
	}
	ch.mu.Lock()
	ch.held += n
	ch.mu.Unlock()
	return r
}

// close gives back all the charge holds: its message is answered.
func (ch *charge) close() {
	if ch == nil {
		return
	}
	ch.mu.Lock()
	n := ch.held
	ch.held = 0
	ch.mu.Unlock()
	ch.b.free(ch.caller, n)
}

// answerSize is about what an answer weighs in memory until it is written.
func answerSize(r schema.Response) int64 {
	n := int64(len(r.ID) + len(r.Result) + 64)
	if r.Error != nil {
		n += int64(len(r.Error.Message) + len(r.Error.Data))
	}
	return n
}
