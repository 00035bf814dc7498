package ingress

import "github.com/toolbus/toolbus/ingress/quota"

// WithRateLimit gives every caller a token bucket of its own (default: no
// rate limit). A call that finds its caller's bucket empty is answered
// -32002 at once, with retry_after_ms (when the next token comes) and
// limit "rate_limit". Without [WithAuth] all calls share the bucket of the
// empty caller. Each call of a batch takes one token.
func WithRateLimit(l quota.RateLimit) Option {
	return func(c *config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.rate = &l
		return nil
	}
}

// WithCallerRateLimit gives one caller a token bucket of its own size, in
// place of the one of [WithRateLimit].
func WithCallerRateLimit(caller string, l quota.RateLimit) Option {
	return func(c *config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		if c.callerRates == nil {
			c.callerRates = map[string]quota.RateLimit{}
		}
		c.callerRates[caller] = l
		return nil
	}
}
