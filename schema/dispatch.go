package schema

import (
	"context"
	"sync"
)

// Dispatcher runs calls. The aggregator is the last one of the ingress's
// chain; every layer in front of it ([Layer]) is a Dispatcher too.
type Dispatcher interface {
	// Dispatch runs every call concurrently, each under its own deadline,
	// and hands each answer to emit as soon as it exists, in completion
	// order, with the index of its call; notifications get none. emit is
	// called from one goroutine at a time and never after Dispatch
	// returns. When ctx ends, the calls still open are answered
	// [CodeCanceled].
	Dispatch(ctx context.Context, calls []Call, emit func(i int, r Response))
}

// DispatcherFunc is a function that is a [Dispatcher].
type DispatcherFunc func(ctx context.Context, calls []Call, emit func(i int, r Response))

// Dispatch implements [Dispatcher].
func (f DispatcherFunc) Dispatch(ctx context.Context, calls []Call, emit func(i int, r Response)) {
	f(ctx, calls, emit)
}

// Layer puts one concern in front of a [Dispatcher]: it sees every call
// on its way to next and every answer on its way back.
type Layer func(next Dispatcher) Dispatcher

// Chain returns d behind layers. Layers are listed in call order: a call
// passes through layers[0] first and reaches d last. A nil layer is
// skipped, so that an optional concern can be listed in its place.
func Chain(d Dispatcher, layers ...Layer) Dispatcher {
	for i := len(layers) - 1; i >= 0; i-- {
		if layers[i] != nil {
			d = layers[i](d)
		}
	}
	return d
}

// Collect runs calls on d and returns their answers in call order; the
// entries of notifications are zero.
func Collect(ctx context.Context, d Dispatcher, calls []Call) []Response {
	out := make([]Response, len(calls))
	d.Dispatch(ctx, calls, func(i int, r Response) { out[i] = r })
	return out
}

// Subset is some of the calls of a set, each with its index in the set. A
// layer that answers some calls itself hands the rest on as a Subset.
type Subset struct {
	Calls []Call
	index []int
}

// Add adds c, the call at index i of the set. A Subset made with room
// for its calls (Calls of length 0 and the capacity it needs) makes room
// for their indexes at once too.
func (s *Subset) Add(i int, c Call) {
	if s.index == nil && cap(s.Calls) > 0 {
		s.index = make([]int, 0, cap(s.Calls))
	}
	s.Calls = append(s.Calls, c)
	s.index = append(s.index, i)
}

// Len returns how many calls s holds.
func (s *Subset) Len() int { return len(s.Calls) }

// Dispatch runs the calls of s on next and hands each answer to emit under
// the index its call has in the whole set.
func (s *Subset) Dispatch(ctx context.Context, next Dispatcher, emit func(i int, r Response)) {
	if len(s.Calls) == 0 {
		return
	}
	next.Dispatch(ctx, s.Calls, func(j int, r Response) {
		if j < 0 || j >= len(s.index) {
			emit(-1, r) // out of range in the set too: the receiver reports it
			return
		}
		emit(s.index[j], r)
	})
}

// Answers keeps, for a set of calls handed to a dispatcher that might
// misbehave, which calls have their answer, so that each call is answered
// exactly once and none after the set is closed. Its methods serialize
// their callbacks: they run one at a time.
type Answers struct {
	mu       sync.Mutex
	calls    []Call
	answered []bool
	closed   bool
}

// NewAnswers returns the bookkeeping of calls, none answered.
func NewAnswers(calls []Call) *Answers {
	return &Answers{calls: calls, answered: make([]bool, len(calls))}
}

// Answer runs f for an answer to call i, with first reporting whether it
// is the first answer of a call that expects one while the set is open;
// the call then counts as answered. Any other answer (a notification's,
// a second one, one out of range or after [Answers.Close]) gets first
// false, for f to report and drop.
func (a *Answers) Answer(i int, f func(first bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first := !a.closed && i >= 0 && i < len(a.calls) && !a.calls[i].IsNotification() && !a.answered[i]
	if first {
		a.answered[i] = true
	}
	f(first)
}

// Close closes the set and runs f, one index at a time, for every call
// that got no answer, notifications included.
func (a *Answers) Close(f func(i int)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for i := range a.calls {
		if !a.answered[i] {
			f(i)
		}
	}
}

// MaxIdempotencyKey is the longest idempotency key a client may send.
const MaxIdempotencyKey = 255

// SetIdempotencyKey names each call of a message that expects an answer by
// the client's idempotency key (the Idempotency-Key header), in
// [Call.IdempotencyKey]: a message of one such call is named by the key
// alone; in a batch, each call is named by the key together with its id,
// so that a batch sent again with the same key and ids is answered call by
// call. An empty key names nothing.
func SetIdempotencyKey(calls []Call, key string) {
	if key == "" {
		return
	}
	n := 0
	for i := range calls {
		if !calls[i].IsNotification() {
			n++
		}
	}
	for i := range calls {
		c := &calls[i]
		switch {
		case c.IsNotification():
		case n == 1:
			c.IdempotencyKey = key
		default:
			c.IdempotencyKey = key + "\x00" + string(c.ID)
		}
	}
}
