package aggregator

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Defaults of the liveness and retry policy of [New].
const (
	// DefaultHeartbeat is the interval at which a worker reports that a
	// call it holds is alive; DefaultHeartbeatMisses intervals without
	// word mean its worker is lost.
	DefaultHeartbeat       = time.Second
	DefaultHeartbeatMisses = 3
	// DefaultAckTimeout is how long a retry-safe call may go unacknowledged
	// before it is published again.
	DefaultAckTimeout = time.Second
	// DefaultAckDelay is how long a worker may hold back the ack of a call
	// ([WithAckDelay]): 20 ms, so that a tool answered sooner, as most
	// in-memory tools are, costs two bus messages rather than three. It
	// saved 4 to 5% of the CPU of an echo call over the bus of toolbus
	// dev, single calls and 10-call batches alike (BENCHMARKS.md); a
	// worker lost within the delay is noticed 20 ms later than it would
	// be otherwise.
	DefaultAckDelay = 20 * time.Millisecond
	// DefaultMaxAttempts bounds how often a retry-safe call is published:
	// the first time and once more.
	DefaultMaxAttempts = 2
	// DefaultBusyWait is how long a call may keep being refused by busy
	// workers before it is answered -32002.
	DefaultBusyWait = time.Second
	// busyBackoffMin and busyBackoffMax bound the wait before a call that a
	// busy worker refused is published again.
	busyBackoffMin = time.Millisecond
	busyBackoffMax = 50 * time.Millisecond
	// namedFallbackMax bounds the wait, doubling from busyBackoffMax,
	// before a refused call is published again to the queue group when
	// its workers name their free slots (rule 10): a reply naming one
	// normally sends it on long before.
	namedFallbackMax = 200 * time.Millisecond
)

// WithHeartbeat sets the liveness of calls: every call asks its worker
// for an acknowledgement and a heartbeat every interval, and a call whose
// worker acknowledged it and then stayed silent for misses intervals is
// lost: it is published again when its method is retry-safe
// ([WithRetrySafe]) and attempts remain, and answered -32003 with
// data.reason "worker_lost" otherwise, long before its deadline (see
// [WithAckDelay] for a call whose ack may be held back). A worker that
// never acknowledges (one older than the protocol) is waited for until
// the deadline, as before. Workers hold the aggregator to the same
// patience the other way round: one whose heartbeats of a call found
// nobody listening on the aggregator's inbox misses times in a row (the
// aggregator died, or closed its connection) cancels the call. Defaults
// [DefaultHeartbeat] and [DefaultHeartbeatMisses]; an interval of zero
// turns liveness off, and with it the busy refusals of load-aware workers
// and the cancellation of the calls of a vanished aggregator.
func WithHeartbeat(interval time.Duration, misses int) Option {
	return func(c *config) error {
		if interval < 0 || (interval > 0 && interval < 10*time.Millisecond) || misses < 1 {
			return fmt.Errorf("aggregator: heartbeat interval must be zero or at least 10ms and misses at least 1, got %v and %d", interval, misses)
		}
		c.heartbeat, c.misses = interval, misses
		return nil
	}
}

// WithRetrySafe names the methods (patterns such as "math.*" or
// "search.>", see [schema.MatchMethod]) whose calls may run more than once
// with the effect of running once. Only those are published again: when no
// worker acknowledged them within the ack timeout ([WithAckTimeout]), and
// when their worker was lost. Default: none.
func WithRetrySafe(patterns ...string) Option {
	return func(c *config) error {
		for _, p := range patterns {
			if err := schema.ValidatePattern(p); err != nil {
				return fmt.Errorf("aggregator: retry-safe: %w", err)
			}
		}
		c.retrySafe = append(c.retrySafe, patterns...)
		return nil
	}
}

// WithRetrySafeFunc adds a dynamic test of retry safety to the patterns of
// [WithRetrySafe]: a method is retry-safe when safe reports true, for
// example because its workers advertise it as idempotent. safe is called on
// the call path and must be fast and safe for concurrent use.
func WithRetrySafeFunc(safe func(method string) bool) Option {
	return func(c *config) error {
		if safe == nil {
			return errors.New("aggregator: nil retry-safe func")
		}
		c.retrySafeFunc = safe
		return nil
	}
}

// WithAckTimeout sets how long a retry-safe call may go without any worker
// acknowledging it before it is published again (default
// [DefaultAckTimeout]).
func WithAckTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: ack timeout must be positive, got %v", d)
		}
		c.ackTimeout = d
		return nil
	}
}

// WithAckDelay lets workers hold back the ack of a call for up to d
// (default [DefaultAckDelay], zero: the ack at once): a call answered
// within d is then answered without an ack, one bus message fewer for
// every short call. Only the calls of a method whose workers were seen to
// acknowledge a call carry the delay: the first calls of a method ask for
// the ack at once, and so do its calls for an hour after one of its
// workers answered a call late without acknowledging it (a worker that
// does not speak the liveness protocol). So a call silent for d and then
// misses heartbeat intervals ([WithHeartbeat]) had its worker lost, as a
// call silent for that long after its ack: it is published again when
// retry-safe with attempts left, and answered -32003 worker_lost
// otherwise. A worker that does not acknowledge, serving a method beside
// workers that do, may have its calls longer than that taken for lost
// until one of them answers, at most once an hour. The delay asked for is at most half the ack timeout
// ([WithAckTimeout]) and half the heartbeat interval, in whole
// milliseconds; below a millisecond, workers acknowledge at once.
func WithAckDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("aggregator: ack delay must not be negative, got %v", d)
		}
		c.ackDelay = d
		return nil
	}
}

// WithMaxAttempts bounds how many times a retry-safe call is published in
// all (default [DefaultMaxAttempts]). Refusals by busy workers do not
// count: nothing of the call ran.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("aggregator: max attempts must be at least 1, got %d", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBusyWait sets how long a call may keep being refused by workers at
// their concurrency limit (busy, see [WithHeartbeat]) before it is answered
// -32002 with retry_after_ms and data.reason "workers_busy" (default
// [DefaultBusyWait]). Meanwhile it is published again after a short
// backoff, for a worker with room. This keeps overload from piling up in
// the aggregator: calls the workers cannot take are refused quickly.
func WithBusyWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: busy wait must be positive, got %v", d)
		}
		c.busyWait = d
		return nil
	}
}

// WithMethodMaxInFlight caps the calls of one method in flight across all
// batches of this aggregator (default: only the global cap of
// [WithMaxInFlight]). A call over it is refused at once with
// [schema.CodeOverloaded], retry_after_ms and limit "method_max_in_flight".
func WithMethodMaxInFlight(method string, n int) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(method); err != nil {
			return fmt.Errorf("aggregator: method in-flight cap for %q: %w", method, err)
		}
		if n <= 0 {
			return fmt.Errorf("aggregator: in-flight cap of %s must be positive, got %d", method, n)
		}
		if c.methodInFlight == nil {
			c.methodInFlight = map[string]int{}
		}
		c.methodInFlight[method] = n
		return nil
	}
}
