package bench

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"
)

// Target is one side of a [Compare]: a name for the reports and the URL that
// [Load] sends to.
type Target struct {
	Name string
	URL  string
	// Body, when not empty, is sent to this target in place of the
	// config's Body ([Matrix] only).
	Body string
	// CPU, when not nil, returns the CPU time that every process serving
	// the target has used so far ([Matrix] only): a proxy's and its
	// backend's, a split deployment's three.
	CPU func() (time.Duration, error)
}

// CompareConfig says how [Compare] runs its rounds. Every round of each
// target is one [Load] with the same settings.
type CompareConfig struct {
	// Concurrency lists the concurrencies to compare at, in order.
	// Default 1 and 64.
	Concurrency []int
	// Rounds is how many times each target runs at each concurrency,
	// alternating. Default 3.
	Rounds int
	// Duration is the measured length of one round of one target.
	// Default 2s.
	Duration time.Duration
	// Warmup precedes every round of every target. Default 250ms; a
	// negative value means none.
	Warmup time.Duration
	// Body is the request sent to both targets. Default [EchoRequest].
	Body []byte
	// Header is sent to both targets. Optional.
	Header http.Header
	// Client sends the requests. Default: a client per round, as [Load]
	// makes.
	Client *http.Client
	// Progress, when not nil, is planned for every round of both targets
	// and counts their requests. Optional.
	Progress *Progress
	// Load runs one round ([Matrix] only): for example in a load
	// generator process of its own. Default [Load].
	Load func(context.Context, LoadConfig) (Result, error)
}

// Side is what one target measured at one concurrency.
type Side struct {
	Target Target
	// Result merges the rounds: Requests, Errors and Elapsed are their sums,
	// Throughput is the median of the rounds' throughputs, and latencies
	// come from all the rounds' answers together.
	Result Result
	// Rounds holds the throughput of each round in the order they ran, to
	// show how noisy the machine was.
	Rounds []float64
	// CPU is the CPU time the target's processes used in its measured
	// rounds ([Matrix] only, when the target has a CPU): measured across
	// each whole round, warmup included, and counted at the measured
	// part's share of the round's time. CPUError says why it is missing.
	CPU      time.Duration
	CPUError error
}

// CPUPerRequest returns the CPU time the target's processes spent on one
// request, and false when it is not known.
func (s Side) CPUPerRequest() (time.Duration, bool) {
	if s.Target.CPU == nil || s.CPUError != nil || s.Result.Requests == 0 {
		return 0, false
	}
	return s.CPU / time.Duration(s.Result.Requests), true
}

// Comparison is the outcome of [Compare] at one concurrency.
type Comparison struct {
	Concurrency       int
	Baseline, Subject Side
	// Ratio is the subject's throughput over the baseline's; 0 when the
	// baseline answered nothing.
	Ratio float64
	// AddedMean is the subject's mean latency minus the baseline's.
	AddedMean time.Duration
}

// Compare measures baseline and subject on the same machine at each of
// cfg.Concurrency: it runs [Load] against them in turn, baseline then
// subject, for cfg.Rounds rounds, so that a burst of noise from elsewhere
// hits one round rather than one target. It returns one [Comparison] per
// concurrency; when a round fails (ctx ended, a bad config) it returns the
// comparisons finished so far and the error.
func Compare(ctx context.Context, baseline, subject Target, cfg CompareConfig) ([]Comparison, error) {
	rows, err := Matrix(ctx, []Target{baseline, subject}, cfg)
	out := make([]Comparison, 0, len(rows))
	for _, r := range rows {
		out = append(out, pairOf(r.Concurrency, r.Sides[0], r.Sides[1]))
	}
	return out, err
}

// withDefaults returns cfg with its defaults filled in, or the error of
// a setting out of range.
func (cfg CompareConfig) withDefaults() (CompareConfig, error) {
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{1, 64}
	}
	if slices.ContainsFunc(cfg.Concurrency, func(c int) bool { return c <= 0 }) {
		return cfg, errors.New("bench: compare concurrencies must be positive")
	}
	if cfg.Rounds < 0 {
		return cfg, errors.New("bench: compare rounds must not be negative")
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	cfg.Warmup = warmup(cfg.Warmup)
	if cfg.Body == nil {
		cfg.Body = []byte(EchoRequest)
	}
	if cfg.Load == nil {
		cfg.Load = Load
	}
	return cfg, nil
}

// measured is the share of a round's time that is measured: a round's
// CPU time is read around the whole round, its warmup included, and
// counted at this share.
func (cfg CompareConfig) measured() float64 {
	return float64(cfg.Duration) / float64(cfg.Warmup+cfg.Duration)
}

// round is the load of one round of t at concurrency c: t's Body, when
// set, in place of cfg's.
func (cfg CompareConfig) round(t Target, c int) LoadConfig {
	body := cfg.Body
	if t.Body != "" {
		body = []byte(t.Body)
	}
	return LoadConfig{URL: t.URL, Body: body, Header: cfg.Header, Concurrency: c,
		Duration: cfg.Duration, Warmup: cfg.Warmup, Client: cfg.Client, progress: cfg.Progress}
}

func mergeRounds(t Target, rs []Result) Side {
	s := Side{Target: t, Result: Result{hist: new(histogram)}}
	for _, r := range rs {
		s.Rounds = append(s.Rounds, r.Throughput)
		s.Result.Concurrency = r.Concurrency
		s.Result.Requests += r.Requests
		s.Result.Errors += r.Errors
		s.Result.Elapsed += r.Elapsed
		if s.Result.FirstError == nil {
			s.Result.FirstError = r.FirstError
		}
		s.Result.hist.merge(r.hist)
	}
	s.Result.Throughput = median(s.Rounds)
	s.Result.setLatencies()
	return s
}

// median returns the middle of xs (the mean of the two middles when their
// number is even), 0 when xs is empty. It does not modify xs.
func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// defaultWarmup is the warmup of the scenarios that compare rounds.
const defaultWarmup = 250 * time.Millisecond

// warmup reads a configured warmup: zero means [defaultWarmup], a negative
// value none.
func warmup(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return defaultWarmup
	case d < 0:
		return 0
	}
	return d
}
