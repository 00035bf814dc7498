package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// DefaultConcurrency is how many calls of one method a runtime runs at once
// unless [WithConcurrency] or [Concurrency] says otherwise. It is high enough
// for hundreds of calls of a tool that mostly waits.
const DefaultConcurrency = 1024

// ResultHeadroom is what the default result limit leaves of the connection's
// largest message for the reply envelope around the result.
const ResultHeadroom = 4 << 10

type config struct {
	subjects       bus.Subjects
	logger         *slog.Logger
	concurrency    int
	maxResultBytes int64
	announce       time.Duration         // zero: no announcements; see WithAnnounce
	registerer     prometheus.Registerer // nil: no metrics; see WithMetrics
	tracerProvider trace.TracerProvider  // nil: the global one; see WithTracerProvider
	noStatus       bool                  // see WithoutStatus
	version        string                // see WithVersion
}

// WithVersion sets the version the runtime reports in its status and its
// announcements' status service (default: the main module's version from
// the build information, or "dev").
func WithVersion(v string) Option {
	return func(c *config) error {
		c.version = v
		return nil
	}
}

// WithoutStatus turns off the status service a started runtime answers on
// the bus (default on): without it, `toolbus status` does not list the
// worker. A program that serves the status itself uses it.
func WithoutStatus() Option {
	return func(c *config) error {
		c.noStatus = true
		return nil
	}
}

// Option configures [New].
type Option func(*config) error

// WithPrefix sets the subject prefix of the cluster (default
// [bus.DefaultPrefix]); it must follow the method-name grammar. It is
// [WithSubjects] for a program that has only its prefix.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		s, err := bus.NewSubjects(prefix)
		if err != nil {
			return err
		}
		return WithSubjects(s)(c)
	}
}

// WithSubjects sets the subjects of the cluster (default
// [bus.DefaultSubjects]), for a process that made them once for all its
// parts. The zero value is refused.
func WithSubjects(s bus.Subjects) Option {
	return func(c *config) error {
		if s.IsZero() {
			return errors.New("worker: zero subjects: make them with bus.NewSubjects")
		}
		c.subjects = s
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()). The runtime logs
// skipped, undecodable and panicking calls, and each call at debug level.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("worker: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithConcurrency sets how many calls of one method run at once, for methods
// registered without [Concurrency] (default [DefaultConcurrency]).
func WithConcurrency(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("worker: concurrency must be at least 1, got %d", n)
		}
		c.concurrency = n
		return nil
	}
}

// WithMaxResultBytes sets the largest result in bytes of JSON; a larger one
// is answered -32006 naming the limit "max_result_bytes". The default is the
// connection's largest message less [ResultHeadroom], read at every call so
// that it follows the server the connection is on.
func WithMaxResultBytes(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("worker: max result bytes must be at least 1, got %d", n)
		}
		c.maxResultBytes = n
		return nil
	}
}

type handleConfig struct {
	concurrency int
	retrySafe   bool
	desc        schema.Descriptor // set by Describe and Schema
}

// HandleOption configures one method registered with [Runtime.Handle].
type HandleOption func(*handleConfig) error

// Concurrency sets how many calls of this method run at once (default: the
// runtime's, see [WithConcurrency]). A call that finds every slot taken is
// refused at once with a busy message when it carries the heartbeat header
// (the aggregator then offers it to another worker, see PROTOCOL.md rule 8);
// a call without it waits for a slot, at most until its deadline.
func Concurrency(n int) HandleOption {
	return func(c *handleConfig) error {
		if n < 1 {
			return fmt.Errorf("worker: concurrency must be at least 1, got %d", n)
		}
		c.concurrency = n
		return nil
	}
}

// RetrySafe marks a method as safe to run again when a job running it was
// interrupted (its worker died or lost its connection mid-call): running it
// twice has the same effect as running it once. By default a method is not
// safe to retry, and an interrupted job of it fails rather than running a
// second time. See [Runtime.RetrySafe].
func RetrySafe() HandleOption {
	return func(c *handleConfig) error {
		c.retrySafe = true
		return nil
	}
}
