package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of [New].
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxTimeout       = 5 * time.Minute
	DefaultBatchConcurrency = 256
	DefaultMaxInFlight      = 10000
	// overloadRetryAfter is the wait an overloaded aggregator suggests.
	overloadRetryAfter = 100 * time.Millisecond
)

type config struct {
	subjects       bus.Subjects
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	methodTimeouts map[string]time.Duration
	batchCap       int
	maxInFlight    int
	log            *slog.Logger
	accessLog      bool

	callerMaxInFlight int

	heartbeat      time.Duration
	misses         int
	ackTimeout     time.Duration
	ackDelay       time.Duration
	maxAttempts    int
	retrySafe      []string
	retrySafeFunc  func(method string) bool
	methodInFlight map[string]int
	idem           *IdempotencyStore
	idemRecords    int
	idemBytes      int64
	idemFailOpen   bool
	breaker        *Breaker
	hedge          time.Duration
	busyWait       time.Duration
	replyPrefix    string
	local          Local
}

// Option configures [New].
type Option func(*config) error

// WithSubjects sets the subjects of the cluster the calls are published
// under (default [bus.DefaultSubjects]); the zero value is refused.
func WithSubjects(s bus.Subjects) Option {
	return func(c *config) error {
		if s.IsZero() {
			return errors.New("aggregator: zero subjects: make them with bus.NewSubjects")
		}
		c.subjects = s
		return nil
	}
}

// WithDefaultTimeout sets the deadline of a method with no timeout of its own
// (default [DefaultTimeout]).
func WithDefaultTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: default timeout must be positive, got %v", d)
		}
		c.defaultTimeout = d
		return nil
	}
}

// WithMaxTimeout sets the server maximum: no call waits longer, whatever the
// client or the method asks (default [DefaultMaxTimeout]).
func WithMaxTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: max timeout must be positive, got %v", d)
		}
		c.maxTimeout = d
		return nil
	}
}

// WithMethodTimeout sets the timeout of one method, in place of the default.
func WithMethodTimeout(method string, d time.Duration) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(method); err != nil {
			return fmt.Errorf("aggregator: method timeout for %q: %w", method, err)
		}
		if d <= 0 {
			return fmt.Errorf("aggregator: timeout of %s must be positive, got %v", method, d)
		}
		if c.methodTimeouts == nil {
			c.methodTimeouts = map[string]time.Duration{}
		}
		c.methodTimeouts[method] = d
		return nil
	}
}

// WithBatchConcurrency caps the calls of one batch that are in flight at once
// (default [DefaultBatchConcurrency]); the others wait for a slot, still
// under their own deadlines.
func WithBatchConcurrency(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("aggregator: batch concurrency must be positive, got %d", n)
		}
		c.batchCap = n
		return nil
	}
}

// WithMaxInFlight caps the calls in flight across all batches of this
// aggregator (default [DefaultMaxInFlight]). A call over the cap is refused at
// once with [schema.CodeOverloaded] and a retry_after_ms hint. Each named
// caller may take a share of it ([WithCallerMaxInFlight]).
func WithMaxInFlight(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("aggregator: max in-flight must be positive, got %d", n)
		}
		c.maxInFlight = n
		return nil
	}
}

// WithReplyPrefix makes the reply subjects of the calls
// "<prefix>.<id>.<token>" in place of the connection's inbox ("_INBOX..."),
// so that NATS permissions can let workers answer them for longer than
// the calls of an ingress usually last, as the job runner's calls need
// ([bus.Subjects.JobReplies]). Default: the connection's inbox.
//
// NATS cannot tell which worker may answer on such a subject, as it does
// with allow_responses on an inbox: only the subject being unguessable
// keeps other workers from answering there. So <id>, made once, and
// <token>, made for each call, are each a [bus.ReplyToken] (128 bits from
// crypto/rand), which only the worker given the call learns.
func WithReplyPrefix(prefix string) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(prefix); err != nil {
			return fmt.Errorf("aggregator: reply prefix: %w", err)
		}
		c.replyPrefix = prefix
		return nil
	}
}

// WithLogger sets the logger of the per-call log lines (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("aggregator: nil logger")
		}
		c.log = l
		return nil
	}
}

// WithAccessLog writes the per-call "call" line (id, method, duration,
// outcome, code) at level Info when on; when off, the default, it is
// written at level Debug, so that nothing is logged per call at the default
// level on the hot path. A line costs about as much as the call's own
// bookkeeping: see BENCHMARKS.md.
func WithAccessLog(on bool) Option {
	return func(c *config) error {
		c.accessLog = on
		return nil
	}
}

// New returns an aggregator that publishes on nc.

// Local runs calls in the aggregator's own process, beside the bus: a
// [worker.Runtime] in the same process is one.
type Local interface {
	// TryInvoke runs call when it can take it at once and returns its
	// answer with ok set, or returns ok false having run nothing. It
	// returns by the time ctx ends.
	TryInvoke(ctx context.Context, call *schema.Call) (result json.RawMessage, err *schema.Error, ok bool)
}

// LocalGoroutines is what a [Local] may offer besides: Go runs f on a
// goroutine of the Local's own that keeps its grown stack from one
// function to the next. When the Local given to [WithLocal] has it, the
// aggregator waits for each local call on such a goroutine rather than on
// one started for the call, which would grow its stack anew, by copying,
// on the way of every call and its answer (a few percent of the CPU of a
// local call, more for batches). Go must not wait (the aggregator calls
// it from its reply callback too), and must run f exactly once, even once
// the Local is closed: f answers the call.
type LocalGoroutines interface {
	Go(f func())
}

// LocalStarter is what a [Local] may offer besides: StartLocal starts a
// call and answers it later, from the goroutine that ran it, so that no
// goroutine of the aggregator waits for a local call and the aggregator
// makes no context or timer of its own for it (its table's one timer
// watches the deadline). When the Local given to [WithLocal] has it, the aggregator starts
// with it every local call that reports no progress (a call with
// [schema.Call.Progress] set is a job's, and is handed to TryInvoke,
// which hands its reports on).
//
// StartLocal starts call when the Local can take it at once, and reports
// whether it did; when it did not, nothing ran and answer is never
// called. A call started has deadline as its deadline, and answer is
// called exactly once, from any goroutine, even before StartLocal
// returns: with the handler's result, or with an error and a nil result
// (the handler's, or the Local's own, such as a shutdown's). stop ends the handler's context (the aggregator calls
// it when it answered the call without the handler: its deadline passed,
// or its client left, and never with a lock of its own held, so that
// stop may call answer); it may be called at any time, more than once,
// even after the answer, and must not wait. The aggregator watches the
// deadline and the client itself, as it does for a call on the bus, so
// a handler that does not listen to its context holds its slot but not
// its caller.
type LocalStarter interface {
	StartLocal(call *schema.Call, deadline time.Time, answer func(result json.RawMessage, err *schema.Error)) (stop func(), ok bool)
}

// WithLocal makes the aggregator hand each call to l before the bus: a call
// l takes is answered by l, without a bus message; a call l cannot take
// now (no handler of its method there, or none free) goes over the bus as
// usual. Everything the aggregator checks before publishing a call (the
// caller's, the ingress's and the method's in-flight limits, the batch's
// concurrency, the circuit breaker, the idempotency record) it checks for
// a local call too, and its deadline is the same. The bus's liveness
// protocol has nothing to watch in one process: a local call ends at its
// deadline or when its client leaves.
func WithLocal(l Local) Option {
	return func(c *config) error {
		c.local = l
		return nil
	}
}

// callerShare is the in-flight cap of one named caller: as configured, or
// half of the global cap.
func callerShare(cfg config) int {
	if cfg.callerMaxInFlight > 0 {
		return min(cfg.callerMaxInFlight, cfg.maxInFlight)
	}
	return max(cfg.maxInFlight/2, 1)
}
