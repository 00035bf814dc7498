package ingress

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolbus/toolbus/schema"
)

// maxBuckets bounds the token buckets a [Server] keeps; beyond it, buckets
// that are full again (their callers idle) are forgotten, which costs them
// nothing.
const maxBuckets = 10000

// RateLimit is a token bucket: PerSecond calls a second on average, with
// bursts of up to Burst calls.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

func (l RateLimit) check() error {
	if l.PerSecond <= 0 || math.IsInf(l.PerSecond, 0) || math.IsNaN(l.PerSecond) || l.Burst < 1 {
		return fmt.Errorf("ingress: rate limit needs a positive rate and a burst of at least 1, got %+v", l)
	}
	return nil
}

// WithRateLimit gives every caller a token bucket of its own (default: no
// rate limit). A call that finds its caller's bucket empty is answered
// -32002 at once, with retry_after_ms (when the next token comes) and
// limit "rate_limit". Without [WithAuth] all calls share the bucket of the
// empty caller. Each call of a batch takes one token.
func WithRateLimit(l RateLimit) Option {
	return func(c *config) error {
		if err := l.check(); err != nil {
			return err
		}
		c.rate = &l
		return nil
	}
}

// WithCallerRateLimit gives one caller a token bucket of its own size, in
// place of the one of [WithRateLimit].
func WithCallerRateLimit(caller string, l RateLimit) Option {
	return func(c *config) error {
		if err := l.check(); err != nil {
			return err
		}
		if c.callerRates == nil {
			c.callerRates = map[string]RateLimit{}
		}
		c.callerRates[caller] = l
		return nil
	}
}

// limiter holds the token bucket of every caller. It is safe for
// concurrent use.
type limiter struct {
	def     *RateLimit
	callers map[string]RateLimit
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// newLimiter returns nil when no rate limit is configured.
func newLimiter(def *RateLimit, callers map[string]RateLimit) *limiter {
	if def == nil && len(callers) == 0 {
		return nil
	}
	return &limiter{def: def, callers: callers, now: time.Now, buckets: map[string]*rate.Limiter{}}
}

// admit takes a token of caller's bucket, or returns the -32002 answer.
func (l *limiter) admit(caller string) *schema.Error {
	if l == nil {
		return nil
	}
	conf, ok := l.callers[caller]
	if !ok {
		if l.def == nil {
			return nil
		}
		conf = *l.def
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[caller]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = rate.NewLimiter(rate.Limit(conf.PerSecond), conf.Burst)
		l.buckets[caller] = b
	}
	if b.AllowN(now, 1) {
		l.mu.Unlock()
		return nil
	}
	wait := time.Duration((1 - b.TokensAt(now)) / conf.PerSecond * float64(time.Second))
	l.mu.Unlock()
	ms := max(wait.Milliseconds(), 1)
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("rate limited: %g calls a second, bursts of %d", conf.PerSecond, conf.Burst),
		map[string]any{"retryable": true, "retry_after_ms": ms, "limit": "rate_limit"})
}

// sweep forgets the buckets that are full. l.mu is held.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.buckets, k)
		}
	}
}
