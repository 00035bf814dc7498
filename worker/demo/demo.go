package demo

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// Limits of the demo tools.
const (
	// MaxSleep is the longest sleep accepted; longer ones are invalid params.
	MaxSleep = 10 * time.Minute
	// MaxRounds is the most sha256 rounds accepted; more are invalid params
	// naming the limit "max_rounds".
	MaxRounds = 10_000_000
	// MaxActionBytes is the longest action confirm asks about; a longer
	// one is invalid params.
	MaxActionBytes = 1024
	// DefaultFetchMaxBytes is how much of a page fetch_page reads unless
	// [WithFetchMaxBytes] says otherwise.
	DefaultFetchMaxBytes = 1 << 20
	// DefaultFetchTimeout bounds one fetch_page request unless
	// [WithFetchTimeout] says otherwise; the call's own deadline applies too.
	DefaultFetchTimeout = 10 * time.Second

	// fetchSlack is how much longer than one fetch_page request the
	// call's own deadline (its descriptor's timeout) lasts, so that a
	// slow page is answered as fetch_page's own timeout, with its class,
	// rather than cut off by the ingress.
	fetchSlack = 2 * time.Second
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
	// Every tool but sleep, confirm and the specification's update and
	// notifications is a pure function of its params (fetch_page makes
	// a GET, which HTTP defines as safe to repeat), so it is marked
	// retry-safe. sleep stands for a long job with effects, confirm for
	// a question a person answers, which is not put twice, and the
	// others for tools with effects, as their names say: a job of one
	// of them that a lost worker interrupted fails rather than running
	// twice.
	tools := []struct {
		method string
		h      worker.Handler
		d      schema.Descriptor
	}{
		{"echo", worker.HandlerFunc(echo), schema.Descriptor{
			Description: "Answers its params exactly as they came, or null without params.", RetrySafe: true}},
		{"sleep", worker.Typed(sleep), schema.Descriptor{
			Description: "Waits ms milliseconds (at most 10 minutes) and answers slept_ms, reporting progress when run as a job."}},
		{"confirm", worker.Typed(confirm), schema.Descriptor{
			Description: "Asks its caller to confirm action and answers whether they did; run it as a job (rpc.jobs.submit), since only a job can be asked.",
			Asks:        true}},
		{"fail", worker.Typed(fail), schema.Descriptor{
			Description: "Fails with the error its params describe: code (default -32000), message and data.", RetrySafe: true}},
		{"sha256", worker.Typed(hashRounds), schema.Descriptor{
			Description: "Hashes data with SHA-256, then the digest again, rounds times in all, and answers the last digest.", RetrySafe: true}},
		{"fetch_page", worker.Typed(f.fetch), schema.Descriptor{
			Description: "Fetches a public web page over http or https and answers its status, title and readable text.", RetrySafe: true,
			TimeoutMS: (cfg.fetchTimeout + fetchSlack).Milliseconds()}},
		{"subtract", worker.Typed(subtract), schema.Descriptor{
			Description: "Subtracts subtrahend from minuend, given as [minuend, subtrahend] or by name.", RetrySafe: true,
			Result: json.RawMessage(`{"type":"number"}`)}},
		{"sum", worker.Typed(sum), schema.Descriptor{
			Description: "Adds up an array of numbers.", RetrySafe: true,
			Result: json.RawMessage(`{"type":"number"}`)}},
		{"get_data", worker.HandlerFunc(getData), schema.Descriptor{
			Description: `Answers the fixed array ["hello", 5].`, RetrySafe: true,
			Result: json.RawMessage(`{"type":"array","prefixItems":[{"const":"hello"},{"const":5}],"items":false}`)}},
		{"update", worker.HandlerFunc(accept), schema.Descriptor{
			Description: "Accepts any params and answers null; the specification calls it as a notification.",
			Result:      json.RawMessage(`{"type":"null"}`)}},
		{"notify_hello", worker.HandlerFunc(accept), schema.Descriptor{
			Description: "Accepts any params and answers null; the specification calls it as a notification.",
			Result:      json.RawMessage(`{"type":"null"}`)}},
		{"notify_sum", worker.HandlerFunc(accept), schema.Descriptor{
			Description: "Accepts any params and answers null; the specification calls it as a notification.",
			Result:      json.RawMessage(`{"type":"null"}`)}},
	}
	for _, t := range tools {
		if err := rt.Handle(t.method, t.h, worker.Describe(t.d)); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}
