package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of a [Service].
const (
	// DefaultMaxAttempts is how many times a job may start running: the
	// first run and the reruns of a tool safe to retry after its worker was
	// interrupted.
	DefaultMaxAttempts = 3
	// DefaultMaxParamsBytes bounds a job's params.
	DefaultMaxParamsBytes = 1 << 20
	// DefaultListLimit is the page size of rpc.jobs.list when the caller
	// asks for none; DefaultMaxListLimit the largest it may ask for.
	DefaultListLimit    = 20
	DefaultMaxListLimit = 200
	// DefaultMaxListScan bounds how many records one rpc.jobs.list call
	// reads while filtering; past it the page ends early with a cursor.
	DefaultMaxListScan = 2000
	// DefaultCallbackAttempts is how many times a callback is tried.
	DefaultCallbackAttempts = 5
	// DefaultCallbackMinBackoff and DefaultCallbackMaxBackoff bound the
	// wait between callback attempts, which doubles from the first to the
	// second.
	DefaultCallbackMinBackoff = time.Second
	DefaultCallbackMaxBackoff = time.Minute
	// DefaultCallbackTimeout bounds one callback request, from connecting
	// to the end of its answer.
	DefaultCallbackTimeout = 10 * time.Second
	// MaxCallbackTimeout is the longest [WithCallbackTimeout] accepts: an
	// attempt must end well within the lease of its queue message, which
	// is not renewed while it runs.
	MaxCallbackTimeout = callbackLease / 2
)

// Fixed bounds of submitted fields, named in their errors.
const (
	MaxIdempotencyKeyBytes = 256
	MaxNotifyURLBytes      = 2048
	MaxContextIDBytes      = 256
	// MaxReferences bounds how many jobs one job's references name, and
	// MaxReferenceBytes each of them.
	MaxReferences     = 64
	MaxReferenceBytes = 256
	// MaxMessageIDBytes bounds the id of a submitted message.
	MaxMessageIDBytes = 256
)

// MaxHistoryBytes is the byte budget of a job's history (the JSON of its
// messages). The history lives in the job's record, which shares the NATS
// server's max_payload (1 MiB by default) with the job's params and
// result: when a message would take the history over its budget, or the
// record over max_payload, the oldest messages are dropped and counted in
// the record's history_dropped. It is fixed, so that every replica keeps
// the same history.
const MaxHistoryBytes = 64 << 10

type config struct {
	subjects       bus.Subjects
	logger         *slog.Logger
	store          storeConfig
	ttl            time.Duration
	maxAttempts    int
	maxParamsBytes int
	listLimit      int
	maxListLimit   int
	maxListScan    int
	counters       *Counters

	callerMaxQueued int64
	maxSubs         int
	callerMaxSubs   int

	callbackSecret   []byte
	callbackTimeout  time.Duration
	callbackAttempts int
	callbackMin      time.Duration
	callbackMax      time.Duration
	// callbackAllow are the allowlist entries of the callbacks' guard;
	// egress holds further options of it (tests resolve and dial through
	// hooks).
	callbackAllow []string
	egress        []egress.Option

	// authorize decides whether the caller of ctx may run a method; nil
	// allows every method.
	authorize func(ctx context.Context, method string) *schema.Error
	// checkMethod judges a submitted method and its params; nil accepts
	// every method at once.
	checkMethod MethodCheck
}

func defaultConfig() config {
	return config{
		subjects:         bus.DefaultSubjects(),
		logger:           slog.Default(),
		store:            defaultStoreConfig(),
		ttl:              DefaultTTL,
		maxAttempts:      DefaultMaxAttempts,
		maxParamsBytes:   DefaultMaxParamsBytes,
		listLimit:        DefaultListLimit,
		maxListLimit:     DefaultMaxListLimit,
		maxListScan:      DefaultMaxListScan,
		callbackTimeout:  DefaultCallbackTimeout,
		callerMaxQueued:  DefaultCallerMaxQueued,
		maxSubs:          DefaultMaxSubscriptions,
		callerMaxSubs:    DefaultCallerMaxSubscriptions,
		callbackAttempts: DefaultCallbackAttempts,
		callbackMin:      DefaultCallbackMinBackoff,
		callbackMax:      DefaultCallbackMaxBackoff,
	}
}

// errZeroSubjects refuses the zero [bus.Subjects], which name nothing.
var errZeroSubjects = errors.New("jobs: zero subjects: make them with bus.NewSubjects")

// Option configures [New].
type Option func(*config) error

// CheckOptions applies opts as [New] would and returns the first error,
// so that settings can be checked before anything connects.
func CheckOptions(opts ...Option) error {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	return nil
}

// WithAuthorize makes rpc.jobs.submit ask authorize whether the caller of
// the submitting call (its context is passed on) may call the method it
// submits; a non-nil answer refuses the submit with it. The ingress's
// ingress.Allowed is such a function. Without it, any method may be
// submitted by whoever may call rpc.jobs.submit.
func WithAuthorize(authorize func(ctx context.Context, method string) *schema.Error) Option {
	return func(c *config) error {
		c.authorize = authorize
		return nil
	}
}

// MethodCheck judges, at submit, a job of method with params: it returns
// the error that refuses the submit, or why the accepted job will wait
// (such as [schema.ReasonNoWorkers]; "" when nothing is known to hold it
// up), which its record shows as [schema.JobRecord.Waiting] while it is
// queued. ctx is the submitting call's.
type MethodCheck func(ctx context.Context, method string, params json.RawMessage) (waiting string, e *schema.Error)

// WithMethodCheck makes rpc.jobs.submit ask check about the method and
// params it submits, after the caller's permission ([WithAuthorize]) and
// the size of the params: a submit that cannot run (a method no worker
// ever served, params that break the method's schema) is refused at once
// rather than queued for ever. The ingress builds it from its registry of
// tools (discovery's Registry.Check). Without it, every method is accepted
// and no job says it waits.
func WithMethodCheck(check MethodCheck) Option {
	return func(c *config) error {
		c.checkMethod = check
		return nil
	}
}

// WithSubjects sets the cluster's subjects (default
// [bus.DefaultSubjects]); the stream, bucket and subjects of jobs are
// named after their prefix. The zero value is refused.
func WithSubjects(s bus.Subjects) Option {
	return func(c *config) error {
		if s.IsZero() {
			return errZeroSubjects
		}
		c.subjects = s
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("jobs: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithReplicas sets the replica count of the stream and bucket (default
// [DefaultReplicas]); 3 on a three-node cluster keeps every acknowledged
// write on a majority of the nodes.
func WithReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("jobs: replicas must be 1 to 5, got %d", n)
		}
		c.store.replicas = n
		return nil
	}
}

// WithTTL sets how long a finished job's record is kept (default
// [DefaultTTL]). Queued and running jobs never expire. JetStream counts
// TTLs in whole seconds, so it must be at least a second.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second {
			return fmt.Errorf("jobs: ttl must be at least 1s, got %v", d)
		}
		c.ttl = d.Truncate(time.Second)
		return nil
	}
}

// WithMaxAttempts sets how many times a job may start running (default
// [DefaultMaxAttempts]); it is stored with each job when it is submitted.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jobs: max attempts must be at least 1, got %d", n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithMaxQueued bounds the jobs waiting in the queue (default
// [DefaultMaxQueued]); a submit past it is refused with -32006 naming
// "max_queued_jobs".
func WithMaxQueued(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jobs: max queued jobs must be at least 1, got %d", n)
		}
		c.store.maxQueued = n
		return nil
	}
}

// WithStoreBytes sets the byte caps of the queue stream and of the bucket
// of records (defaults [DefaultQueueMaxBytes], [DefaultRecordsMaxBytes]).
// A submit the full queue cannot take is refused -32006 naming
// job_queue_max_bytes; one the full bucket cannot record is refused -32003
// naming job_records_max_bytes. Choose them, with the idempotency bucket's,
// to fit the JetStream store of the servers.
func WithStoreBytes(queue, records int64) Option {
	return func(c *config) error {
		if queue < 1<<20 || records < 1<<20 {
			return fmt.Errorf("jobs: store byte caps must be at least 1 MiB, got %d and %d", queue, records)
		}
		c.store.queueBytes, c.store.recordsBytes = queue, records
		return nil
	}
}

// WithMaxParamsBytes bounds a job's params (default
// [DefaultMaxParamsBytes]); larger ones are refused with -32006 naming
// "max_params_bytes".
func WithMaxParamsBytes(n int) Option {
	return func(c *config) error {
		if n < 2 {
			return fmt.Errorf("jobs: max params bytes must be at least 2, got %d", n)
		}
		c.maxParamsBytes = n
		return nil
	}
}

// WithListLimits sets the page size of rpc.jobs.list when none is asked for
// and the largest one a caller may ask for (defaults [DefaultListLimit] and
// [DefaultMaxListLimit]).
func WithListLimits(def, max int) Option {
	return func(c *config) error {
		if def < 1 || max < def {
			return fmt.Errorf("jobs: list limits must satisfy 1 <= default <= max, got %d and %d", def, max)
		}
		c.listLimit, c.maxListLimit = def, max
		if c.maxListScan < max {
			c.maxListScan = max
		}
		return nil
	}
}

// WithCallbackSecret enables completion callbacks: a job submitted with a
// notify_url gets its final record POSTed there, signed with HMAC-SHA256
// under secret over the timestamp and the body ([Sign]). Without a secret a
// notify_url is refused.
func WithCallbackSecret(secret []byte) Option {
	return func(c *config) error {
		if len(secret) < 16 {
			return fmt.Errorf("jobs: callback secret must be at least 16 bytes, got %d", len(secret))
		}
		c.callbackSecret = append([]byte(nil), secret...)
		return nil
	}
}

// WithCallbackAllow admits callback receivers at addresses that are
// otherwise refused (loopback, private, link-local, CGNAT, multicast,
// unspecified, broadcast and reserved ones). An entry is a CIDR
// (10.0.0.0/8), an address (127.0.0.1), an address with a port
// (127.0.0.1:8080), or a host name with an optional port
// (hooks.internal:8443), admitted whatever it resolves to. The default
// admits none; options add up.
func WithCallbackAllow(entries ...string) Option {
	return func(c *config) error {
		if _, err := egress.New(egress.WithAllow(entries...)); err != nil {
			return fmt.Errorf("jobs: callback allowlist: %w", err)
		}
		c.callbackAllow = append(c.callbackAllow, entries...)
		return nil
	}
}

// WithCallbackTimeout bounds one callback request, from connecting to the
// end of its answer (default [DefaultCallbackTimeout]); it may be at most
// [MaxCallbackTimeout]. A request that runs out of it is recorded as
// "timeout" and tried again.
func WithCallbackTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > MaxCallbackTimeout {
			return fmt.Errorf("jobs: callback timeout must be more than 0 and at most %v, got %v", MaxCallbackTimeout, d)
		}
		c.callbackTimeout = d
		return nil
	}
}

// WithCallbackRetry sets how many times a callback is tried and the bounds
// of the exponential backoff between tries (defaults
// [DefaultCallbackAttempts], [DefaultCallbackMinBackoff],
// [DefaultCallbackMaxBackoff]).
func WithCallbackRetry(attempts int, min, max time.Duration) Option {
	return func(c *config) error {
		if attempts < 1 || attempts > 50 {
			return fmt.Errorf("jobs: callback attempts must be 1 to 50, got %d", attempts)
		}
		if min <= 0 || max < min {
			return fmt.Errorf("jobs: callback backoff must satisfy 0 < min <= max, got %v and %v", min, max)
		}
		c.callbackAttempts, c.callbackMin, c.callbackMax = attempts, min, max
		return nil
	}
}
