package demo

import (
	"errors"
	"fmt"
	"net/http"
	"time"

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
	client        *http.Client
	fetchMaxBytes int64
	fetchTimeout  time.Duration
}

// Option configures [Register].
type Option func(*config) error

// WithHTTPClient sets the client fetch_page uses. The default is a client of
// the toolset's own, with a transport cloned from http.DefaultTransport and
// so sharing no connections with the rest of the process.
func WithHTTPClient(c *http.Client) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("demo: nil http client")
		}
		cfg.client = c
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
	if cfg.client == nil {
		cfg.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	f := &fetcher{client: cfg.client, maxBytes: cfg.fetchMaxBytes, timeout: cfg.fetchTimeout}
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
