package quota

import (
	"fmt"
	"sync"

	"github.com/toolbus/toolbus/schema"
)

// Bytes counts the bytes of answers held per caller and in all, between
// their arrival from the dispatcher and their write to the client. It is
// safe for concurrent use; a caller holding nothing takes no memory.
//
// A named caller may hold its share (callerMax of [NewBytes]); the empty
// caller, that of an ingress without authentication, may hold all of max,
// which bounds every caller's together.
type Bytes struct {
	max       int64 // over all callers, and the anonymous caller's share
	callerMax int64 // a named caller's share

	mu    sync.Mutex
	total int64
	held  map[string]int64
}

// NewBytes returns a budget of max bytes over all callers, and of
// callerMax for each named caller (half of max when callerMax is zero or
// less, and never above max).
func NewBytes(max, callerMax int64) *Bytes {
	if callerMax <= 0 {
		callerMax = max / 2
	}
	return &Bytes{max: max, callerMax: min(callerMax, max), held: map[string]int64{}}
}

// limit returns the bound of caller and its name.
func (b *Bytes) limit(caller string) (int64, string) {
	if caller == "" {
		return b.max, "max_bytes_in_flight"
	}
	return b.callerMax, "caller_max_bytes_in_flight"
}

// Admit returns the refusal of a new call of caller while it holds half
// its bound of bytes or more, or while all callers together hold all but
// that much of max; nil otherwise. The half left is room for the answers
// of the calls already running, which would otherwise be dropped on
// arrival; and as a named caller's bound is below max by more than that,
// one caller alone never closes the budget to the others. The refusal is
// -32002, retryable, naming the limit.
func (b *Bytes) Admit(caller string) *schema.Error {
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
func (b *Bytes) take(caller string, n int64) *schema.Error {
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

func (b *Bytes) free(caller string, n int64) {
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
func (b *Bytes) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Charge is what one message's answers hold of their caller's budget. It
// is safe for concurrent use. A nil charge holds nothing.
type Charge struct {
	b      *Bytes
	caller string

	mu   sync.Mutex
	held int64
}

// Open returns an empty charge of caller's, for the answers of one
// message.
func (b *Bytes) Open(caller string) *Charge { return &Charge{b: b, caller: caller} }

// Hold charges r's bytes ([AnswerSize]), or returns r replaced by the
// refusal when they do not fit: -32002, retryable, with may_have_run true,
// since the call ran.
func (ch *Charge) Hold(r schema.Response) schema.Response {
	if ch == nil {
		return r
	}
	n := AnswerSize(r)
	if e := ch.b.take(ch.caller, n); e != nil {
		return schema.Response{ID: r.ID, Error: e}
	}
	ch.mu.Lock()
	ch.held += n
	ch.mu.Unlock()
	return r
}

// Close gives back all the charge holds: its message is answered.
func (ch *Charge) Close() {
	if ch == nil {
		return
	}
	ch.mu.Lock()
	n := ch.held
	ch.held = 0
	ch.mu.Unlock()
	ch.b.free(ch.caller, n)
}

// AnswerSize is about what an answer weighs in memory until it is
// written.
func AnswerSize(r schema.Response) int64 {
	n := int64(len(r.ID) + len(r.Result) + 64)
	if r.Error != nil {
		n += int64(len(r.Error.Message) + len(r.Error.Data))
	}
	return n
}
