package demo

import (
	"fmt"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/worker"
)

// Limits of the demo tools.
const (
	// MaxSleep is the longest sleep accepted; longer ones are invalid params.
	MaxSleep = 10 * time.Minute
	// MaxRounds is the most sha256 rounds accepted; more are invalid params
	// naming the limit "max_rounds".
	MaxRounds = 10_000_000
	// DefaultFetchMaxBytes is how much of a page fetch_page reads unless
	// [WithFetchMaxBytes] says otherwise.
	DefaultFetchMaxBytes = 1 << 20
	// DefaultFetchTimeout bounds one fetch_page request unless
	// [WithFetchTimeout] says otherwise; the call's own deadline applies too.
	DefaultFetchTimeout = 10 * time.Second
)

type config struct {
	fetchAllow    []string
	fetchMaxBytes int64
	fetchTimeout  time.Duration
	// egress holds further options of fetch_page's guard (tests resolve
	// and dial through hooks).
	egress []egress.Option
}

// Option configures [Register].
type Option func(*config) error

// WithFetchAllow admits pages at addresses fetch_page otherwise refuses
// (loopback, private, link-local, CGNAT, multicast, unspecified, broadcast
// and reserved ones). An entry is a CIDR (10.0.0.0/8), an address
// (127.0.0.1), an address with a port (127.0.0.1:8080), or a host name
// with an optional port (intranet.example:8443), admitted whatever it
// resolves to. The default admits none; options add up.
func WithFetchAllow(entries ...string) Option {
	return func(cfg *config) error {
		if _, err := egress.New(egress.WithAllow(entries...)); err != nil {
			return fmt.Errorf("demo: fetch allowlist: %w", err)
		}
		cfg.fetchAllow = append(cfg.fetchAllow, entries...)
		return nil
	}
}

// WithFetchMaxBytes sets how many bytes of a page fetch_page reads (default
// [DefaultFetchMaxBytes]); a longer page is cut there and its result says so,
// naming the limit "max_fetch_bytes".
func WithFetchMaxBytes(n int64) Option {
	return func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("demo: fetch max bytes must be at least 1, got %d", n)
		}
		cfg.fetchMaxBytes = n
		return nil
	}
}

// WithFetchTimeout bounds one fetch_page request, headers and body (default
// [DefaultFetchTimeout]).
func WithFetchTimeout(d time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("demo: fetch timeout must be positive, got %v", d)
		}
		cfg.fetchTimeout = d
		return nil
	}
}

// Register adds every demo tool to rt. It fails on an invalid option or when
// a method is already registered; rt may then hold some of the tools and is
// best discarded.
func Register(rt *worker.Runtime, opts ...Option) error {
	cfg := config{fetchMaxBytes: DefaultFetchMaxBytes, fetchTimeout: DefaultFetchTimeout}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	guard, err := egress.New(append([]egress.Option{egress.WithAllow(cfg.fetchAllow...)}, cfg.egress...)...)
	if err != nil {
		return fmt.Errorf("demo: fetch allowlist: %w", err)
	}
	// The toolset's own client shares no connections with the rest of
	// the process; it follows redirects, each checked as it connects.
	f := &fetcher{client: guard.Client(), maxBytes: cfg.fetchMaxBytes, timeout: cfg.fetchTimeout}
	tools := []struct {
		method string
		h      worker.Handler
	}{
		{"echo", worker.HandlerFunc(echo)},
		{"sleep", worker.Typed(sleep)},
		{"fail", worker.Typed(fail)},
		{"sha256", worker.Typed(hashRounds)},
		{"fetch_page", worker.Typed(f.fetch)},
		{"subtract", worker.Typed(subtract)},
		{"sum", worker.Typed(sum)},
		{"get_data", worker.HandlerFunc(getData)},
		{"update", worker.HandlerFunc(accept)},
		{"notify_hello", worker.HandlerFunc(accept)},
		{"notify_sum", worker.HandlerFunc(accept)},
	}
	for _, t := range tools {
		if err := rt.Handle(t.method, t.h); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}
