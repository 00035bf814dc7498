package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of [New].
const (
	DefaultMaxBodyBytes  int64 = 4 << 20
	DefaultMaxBatchItems       = 1000
	DefaultMaxDepth            = 64
	DefaultMaxTimeout          = 5 * time.Minute
)

// Limits bounds what POST /rpc accepts. A request over a limit is answered
// with a -32006 error whose data names the limit.
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
	ready      func(context.Context) error
	maxTimeout time.Duration
}

func defaultConfig() config {
	return config{
		limits: Limits{
			MaxBodyBytes:  DefaultMaxBodyBytes,
			MaxBatchItems: DefaultMaxBatchItems,
			MaxDepth:      DefaultMaxDepth,
		},
		logger:     slog.Default(),
		maxTimeout: DefaultMaxTimeout,
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
