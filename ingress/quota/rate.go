package quota

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolbus/toolbus/schema"
)

// maxBuckets bounds the token buckets a [Limiter] keeps; beyond it, buckets
// that are full again (their callers idle) are forgotten, which costs them
// nothing.
const maxBuckets = 10000

// RateLimit is a token bucket: PerSecond calls a second on average, with
// bursts of up to Burst calls.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// Validate reports a rate that is not positive and finite, or a burst
// under 1.
func (l RateLimit) Validate() error {
	if l.PerSecond <= 0 || math.IsInf(l.PerSecond, 0) || math.IsNaN(l.PerSecond) || l.Burst < 1 {
		return fmt.Errorf("quota: rate limit needs a positive rate and a burst of at least 1, got %+v", l)
	}
	return nil
}

// Limiter holds the token bucket of every caller. It is safe for
// concurrent use; a nil Limiter admits every call.
type Limiter struct {
	def     *RateLimit
	callers map[string]RateLimit
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// NewLimiter returns the buckets of def, every caller's unless callers
// names one, or nil when neither sets a rate limit. The limits must be
// valid ([RateLimit.Validate]).
func NewLimiter(def *RateLimit, callers map[string]RateLimit) *Limiter {
	if def == nil && len(callers) == 0 {
		return nil
	}
	return &Limiter{def: def, callers: callers, now: time.Now, buckets: map[string]*rate.Limiter{}}
}

// Admit takes a token of caller's bucket, or returns the -32002 answer:
// retryable, with retry_after_ms (when the next token comes) and limit
// "rate_limit".
func (l *Limiter) Admit(caller string) *schema.Error {
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
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.buckets, k)
		}
	}
}
