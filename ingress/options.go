package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/internal/options"
)

// Defaults of [New].
const (
	DefaultMaxBodyBytes  int64 = 4 << 20
	DefaultMaxBatchItems       = 1000
	DefaultMaxDepth            = 64
	DefaultMaxTimeout          = 5 * time.Minute

	// DefaultWebSocketMaxInFlight is the most calls one WebSocket
	// connection has in flight at once.
	DefaultWebSocketMaxInFlight = 256
	// DefaultPingInterval and DefaultPingMisses: the server pings every
	// WebSocket connection at this interval and closes one that misses
	// this many pongs in a row.
	DefaultPingInterval = 20 * time.Second
	DefaultPingMisses   = 3
	// DefaultWebSocketMaxUnsentBytes bounds the answers one WebSocket
	// connection holds unwritten (ws_max_unsent_bytes), and
	// DefaultWebSocketWriteTimeout how long writing one message may take
	// (ws_write_timeout): a client that does not read is closed at either.
	DefaultWebSocketMaxUnsentBytes int64 = 32 << 20
	DefaultWebSocketWriteTimeout         = 30 * time.Second
	// DefaultSSEHeartbeat is the interval of the comment lines that keep
	// an idle event stream open.
	DefaultSSEHeartbeat = 15 * time.Second
)

// Limits bounds what every door accepts (POST /rpc, WebSocket messages,
// /a2a and /mcp), checked before a body reaches any decoder. A request
// over a limit is answered with an error whose data names the limit
// (-32006; -32000 on /a2a, where A2A owns -32006).
type Limits struct {
	// MaxBodyBytes is the largest body read (max_body_bytes); a larger one is
	// answered 413. Zero means [DefaultMaxBodyBytes].
	MaxBodyBytes int64
	// MaxBatchItems is the most elements a batch may hold (max_batch_items).
	// Zero means [DefaultMaxBatchItems].
	MaxBatchItems int
	// MaxDepth is the deepest nesting of arrays and objects in a body,
	// counting a batch's own array (max_depth). Zero means [DefaultMaxDepth].
	MaxDepth int
}

type config struct {
	limits     Limits
	logger     *slog.Logger
	accessLog  bool
	ready      func(context.Context) error
	maxTimeout time.Duration
	// deadline is the declared deadline policy ([WithDeadline]); nil
	// when none is.
	deadline Deadline

	wsMaxInFlight  int
	wsMaxUnsent    int64
	wsWriteTimeout time.Duration
	pingInterval   time.Duration
	pingMisses     int
	origins        []string
	heartbeat      time.Duration
	jsonrpc1       bool
	extensions     map[string]Extension
	registry       *discovery.Registry // set by WithRegistry
	a2aOn          bool                // WithA2A
	a2a            []a2a.Option
	noValidate     bool   // WithValidation(false)
	mcpOrigin      string // WithOrigin
	mcpStateKey    []byte // WithMCPStateKey

	maxHeaderBytes  int
	maxConnsPerAddr int
	maxBytes        int64
	callerMaxBytes  int64

	// fair is the fairness layer's scheduler (see [WithFairness]); nil
	// when fairness is off.
	fair *fairness

	auth        *auth.Authenticator
	authKeys    bool // API keys are configured, for the A2A card
	authJWT     bool // bearer JWTs are configured, for the A2A card
	rate        *quota.RateLimit
	callerRates map[string]quota.RateLimit

	// Observability: see observe.go and dashboard.go.
	id             string
	metrics        *prometheus.Registry
	metricsCallers bool // the fairness series name the callers (WithMetricsCallers)
	tracerProvider trace.TracerProvider
	msglog         *msglog.Log
	// logMessages is set when msglog names methods whose bodies are logged.
	logMessages bool
	noDashboard bool
	jobStats    func(ctx context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error)
	gather      func(ctx context.Context) ([]bus.Status, error)
	natsState   func(ctx context.Context) dashboard.NATSState
}

// CheckOptions reports the first of opts that [New] would refuse, so
// that a configuration is checked before anything connects or starts.
func CheckOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}

// newConfig returns the config opts make of the defaults, or the first
// refusal.
func newConfig(opts []Option) (config, error) {
	return options.Apply(defaultConfig(), opts)
}

func defaultConfig() config {
	return config{
		limits: Limits{
			MaxBodyBytes:  DefaultMaxBodyBytes,
			MaxBatchItems: DefaultMaxBatchItems,
			MaxDepth:      DefaultMaxDepth,
		},
		logger:         slog.Default(),
		maxTimeout:     DefaultMaxTimeout,
		wsMaxInFlight:  DefaultWebSocketMaxInFlight,
		wsMaxUnsent:    DefaultWebSocketMaxUnsentBytes,
		wsWriteTimeout: DefaultWebSocketWriteTimeout,
		pingInterval:   DefaultPingInterval,
		pingMisses:     DefaultPingMisses,
		heartbeat:      DefaultSSEHeartbeat,

		maxHeaderBytes:  DefaultMaxHeaderBytes,
		maxConnsPerAddr: DefaultMaxConnsPerAddr,
		maxBytes:        DefaultMaxBytesInFlight,
	}
}

// Option configures [New].
type Option func(*config) error

// WithLimits sets the request limits. A zero field keeps its default
// ([DefaultMaxBodyBytes], [DefaultMaxBatchItems], [DefaultMaxDepth]); a
// negative one is an error, since the ingress never runs unbounded.
func WithLimits(l Limits) Option {
	return func(c *config) error {
		if l.MaxBodyBytes < 0 || l.MaxBatchItems < 0 || l.MaxDepth < 0 {
			return fmt.Errorf("ingress: limits must not be negative, got %+v", l)
		}
		if l.MaxBodyBytes > 0 {
			c.limits.MaxBodyBytes = l.MaxBodyBytes
		}
		if l.MaxBatchItems > 0 {
			c.limits.MaxBatchItems = l.MaxBatchItems
		}
		if l.MaxDepth > 0 {
			c.limits.MaxDepth = l.MaxDepth
		}
		return nil
	}
}

// WithLogger sets the logger for request lines and failures (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("ingress: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithAccessLog writes a line per HTTP request (method, path, status,
// calls, errors, bytes, duration, remote address) at level Info when on;
// when off, the default, the line is written at level Debug, so that
// nothing is logged per request at the default level on the hot path. A
// request answered with a 5xx status is logged at level Error either way.
func WithAccessLog(on bool) Option {
	return func(c *config) error {
		c.accessLog = on
		return nil
	}
}

// WithReadiness sets what /readyz checks, such as the NATS connection being
// up: a nil error means ready, anything else is reported as the reason the
// ingress is not. The function gets the probe request's context. By default
// the ingress is ready until [Server.Shutdown] starts.
func WithReadiness(ready func(context.Context) error) Option {
	return func(c *config) error {
		if ready == nil {
			return errors.New("ingress: nil readiness func")
		}
		c.ready = ready
		return nil
	}
}

// WithMaxTimeout sets the server maximum call deadline (default
// [DefaultMaxTimeout]). The ingress uses it to size the write timeout of
// [Server.Serve] so the slowest allowed call can still be answered; the
// aggregator enforces it per call.
func WithMaxTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("ingress: max timeout must be positive, got %v", d)
		}
		c.maxTimeout = d
		return nil
	}
}

// WithWebSocketMaxInFlight caps the calls one WebSocket connection has in
// flight at once (default [DefaultWebSocketMaxInFlight]). A call over the cap
// is answered -32002 at once, with retry_after_ms and the limit
// ws_max_in_flight in its data; a notification over it is dropped.
func WithWebSocketMaxInFlight(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("ingress: websocket max in-flight must be positive, got %d", n)
		}
		c.wsMaxInFlight = n
		return nil
	}
}

// WithWebSocketMaxUnsentBytes bounds the bytes of answers one WebSocket
// connection holds that its client has not taken yet (default
// [DefaultWebSocketMaxUnsentBytes]): the answers waiting for the one being
// written, and those of a batch still gathering. A connection past it is
// closed and its calls canceled, so a client that sends calls and never
// reads costs at most this much; the close is counted in
// toolbus_limit_refusals_total as ws_max_unsent_bytes. It counts against
// the caller's budget too ([WithCallerMaxBytesInFlight]).
func WithWebSocketMaxUnsentBytes(n int64) Option {
	return func(c *config) error {
		if n < 1<<10 {
			return fmt.Errorf("ingress: websocket max unsent bytes must be at least 1 KiB, got %d", n)
		}
		c.wsMaxUnsent = n
		return nil
	}
}

// WithWebSocketWriteTimeout bounds how long writing one message to a
// WebSocket client may take (default [DefaultWebSocketWriteTimeout]); a
// client that does not take it in time is closed and its calls canceled,
// counted as ws_write_timeout.
func WithWebSocketWriteTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("ingress: websocket write timeout must be positive, got %v", d)
		}
		c.wsWriteTimeout = d
		return nil
	}
}

// WithWebSocketPing sets how the server tells a live WebSocket peer from a
// dead one: it pings every interval, waits up to interval for the pong, and
// closes the connection, canceling its calls, after misses pings in a row
// went unanswered (defaults [DefaultPingInterval], [DefaultPingMisses]).
func WithWebSocketPing(interval time.Duration, misses int) Option {
	return func(c *config) error {
		if interval <= 0 || misses <= 0 {
			return fmt.Errorf("ingress: websocket ping interval and misses must be positive, got %v and %d", interval, misses)
		}
		c.pingInterval, c.pingMisses = interval, misses
		return nil
	}
}

// WithWebSocketOrigins lets browser pages from other origins open
// WebSocket connections. Each pattern is matched, ignoring case, with
// [path.Match] against the host of the Origin header, or against
// scheme://host when the pattern has a scheme. By default only the same
// origin is accepted (a request without an Origin header, such as one from
// a program rather than a browser, always is). Allowing an origin lets its
// pages call tools with the credentials of their visitors: list only hosts
// you trust.
func WithWebSocketOrigins(patterns ...string) Option {
	return func(c *config) error {
		for _, p := range patterns {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return fmt.Errorf("ingress: bad origin pattern %q", p)
			}
		}
		c.origins = append([]string(nil), patterns...)
		return nil
	}
}

// WithSSEHeartbeat sets the interval of the comment lines (": ping") an
// event stream gets while its calls run, so that proxies keep it open
// (default [DefaultSSEHeartbeat]).
func WithSSEHeartbeat(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("ingress: sse heartbeat must be positive, got %v", d)
		}
		c.heartbeat = d
		return nil
	}
}

// WithJSONRPC1 turns JSON-RPC 1.0 compatibility on or off (default off).
// When on, a request without a "jsonrpc" member is read as JSON-RPC 1.0 and
// answered in 1.0 form, with "result" and "error" both present and the one
// that does not apply null; an id of null makes it a notification. When
// off, such a request is -32600, as JSON-RPC 2.0 says. Each element of a
// batch is answered in its own form.
func WithJSONRPC1(on bool) Option {
	return func(c *config) error {
		c.jsonrpc1 = on
		return nil
	}
}

// Fairness shares the ingress among callers rather than among requests
// ([WithFairness]): every call waits in its caller's queue, and a fair
// scheduler (start-time fair queuing, see package internal/fair) lets the
// calls of all queues into a window of seats, so that while two callers
// are busy each gets about half of the window, whatever their batch
// sizes and connection counts. A body sent to POST /rpc or the REST
// route, and a WebSocket message but one request under [fair.CostUnit],
// waits for its caller's turn before it is parsed, so that parsing a
// large batch holds up no other caller's call.
//
// The seats bound the calls the ingress works on at once; a call that
// keeps its seat for the hold without an answer is waiting on a worker
// rather than on the ingress, and leaves its seat to the next: the window
// is small for work, and takes calls that merely wait (a tool that sleeps
// for seconds) at Seats/HoldMin a second. The hold follows the load: four
// times the average time the calls answered in their seats took, within
// HoldMin and HoldMax.
//
// An operator weights callers ([auth.APIKey.Weight], a JWT's weight
// claim) and exempts some ([auth.APIKey.Exempt]): an exempt caller's
// calls never wait. A zero field takes its default.
type Fairness struct {
	// Off turns fairness off: calls reach the dispatcher as they arrive.
	Off bool
	// Seats is the calls the ingress works on at once (default
	// [fair.DefaultSeats]).
	Seats int
	// HoldMin and HoldMax bound how long a call keeps its seat without an
	// answer (defaults [fair.DefaultHoldMin] and [fair.DefaultHoldMax]).
	HoldMin, HoldMax time.Duration
	// CallerMaxQueued bounds one caller's queue, in calls of small
	// params: a call costs one, and one more per [fair.CostUnit] of its
	// params (default [fair.DefaultFlowMaxQueued]). A call past it is
	// refused -32002 with retry_after_ms and the limit
	// caller_max_queued.
	CallerMaxQueued int
	// CPUTarget is the share of the process's CPUs that the calls let
	// into the window may take while more than one caller is active;
	// below 1, above it the window admits at a pace, so that the process
	// stays idle often enough to read every caller's next request (see
	// "Pacing" in the package doc of internal/fair). The default,
	// [fair.DefaultCPUTarget], is 1: no pacing.
	CPUTarget float64
	// Round is how many calls the window takes between two reads of the
	// ingress's connections while more than one caller is active (0:
	// [fair.DefaultRound]; below 0, no bound): on a saturated core the
	// ingress then reads every caller's next request at least once a
	// round (see "Rounds" in the package doc of internal/fair).
	Round int
}

// config returns the scheduler's configuration of f.
func (f Fairness) config() fair.Config {
	return fair.Config{Seats: f.Seats, HoldMin: f.HoldMin, HoldMax: f.HoldMax, FlowMaxQueued: f.CallerMaxQueued, CPUTarget: f.CPUTarget, Round: f.Round}
}

// WithFairness shares the ingress among callers as f says (see
// [Fairness]); the default is off. The fairness layer is the chain's
// second, after observation and before any other work a call costs
// (see [Server.chain]); the ingress's own rpc.* methods pass it.
func WithFairness(f Fairness) Option {
	return func(c *config) error {
		if f.Off {
			c.fair = nil
			return nil
		}
		fr, err := newFairness(f)
		if err != nil {
			return fmt.Errorf("ingress: fairness: %w", err)
		}
		c.fair = fr
		return nil
	}
}
