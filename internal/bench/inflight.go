package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// The goals of the in-flight scenario, for 10,000 calls in one process.
const (
	// GoalInFlightRSS is the most resident memory the process may reach
	// while it holds the calls.
	GoalInFlightRSS = 100_000_000
	// GoalInFlightSlack is how much longer than the tools' own sleep all
	// the batches may take to be answered.
	GoalInFlightSlack = 500 * time.Millisecond
)

// The in-flight scenario's defaults: ten batches of 1,000 sleep calls of
// 3 s, 10,000 calls in flight at once.
const (
	DefaultInFlightBatches = 10
	DefaultInFlightCalls   = 1000
	DefaultInFlightSleep   = 3 * time.Second
)

// InFlightConfig says what [InFlight] sends.
type InFlightConfig struct {
	// URL is the toolbus ingress. Required.
	URL string
	// Batches is the number of batches sent at once, each on a connection
	// of its own. Default [DefaultInFlightBatches].
	Batches int
	// Calls is the number of sleep calls in one batch. Default
	// [DefaultInFlightCalls].
	Calls int
	// Sleep is how long each call sleeps. Default [DefaultInFlightSleep].
	Sleep time.Duration
	// RSS reports the resident memory of the process measured. Required.
	RSS func() (uint64, error)
}

// inFlightDefaults returns batches, calls and sleep with each zero one
// set to its default.
func inFlightDefaults(batches, calls int, sleep time.Duration) (int, int, time.Duration) {
	if batches == 0 {
		batches = DefaultInFlightBatches
	}
	if calls == 0 {
		calls = DefaultInFlightCalls
	}
	if sleep == 0 {
		sleep = DefaultInFlightSleep
	}
	return batches, calls, sleep
}

// InFlightResult is what [InFlight] measured.
type InFlightResult struct {
	Batches, Calls int
	Sleep          time.Duration
	// Wall is the time from sending the batches to the last answer.
	Wall time.Duration
	// RSSBefore is the resident memory before the batches were sent, and
	// RSSPeak the most seen until the last answer (sampled every 10ms).
	RSSBefore, RSSPeak uint64
	// Failures holds what went wrong with each batch answered wrongly.
	Failures []error
}

// InFlight sends cfg.Batches batches of cfg.Calls `sleep` calls at once,
// so that Batches×Calls calls are in flight in the process measured, and
// reports how long the last answer took and the process's resident memory
// meanwhile. Every id must be answered with its result.
func InFlight(ctx context.Context, cfg InFlightConfig) (InFlightResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return InFlightResult{}, fmt.Errorf("bench: in-flight: %w", err)
	}
	if cfg.RSS == nil {
		return InFlightResult{}, errors.New("bench: in-flight needs RSS")
	}
	cfg.Batches, cfg.Calls, cfg.Sleep = inFlightDefaults(cfg.Batches, cfg.Calls, cfg.Sleep)
	ms := cfg.Sleep.Milliseconds()
	params := []byte(`{"ms":` + strconv.FormatInt(ms, 10) + `}`)
	want := []byte(`{"slept_ms":` + strconv.FormatInt(ms, 10) + `}`)
	var bc batchCheck
	bc.body = append(bc.body, '[')
	for i := range cfg.Calls {
		if i > 0 {
			bc.body = append(bc.body, ',')
		}
		bc.body = appendCall(bc.body, i+1, "sleep", params)
		bc.want = append(bc.want, expectation{id: strconv.AppendInt(nil, int64(i+1), 10), check: resultEqual(want)})
	}
	bc.body = append(bc.body, ']')

	res := InFlightResult{Batches: cfg.Batches, Calls: cfg.Calls, Sleep: cfg.Sleep}
	var err error
	if res.RSSBefore, err = cfg.RSS(); err != nil {
		return res, fmt.Errorf("bench: in-flight: %w", err)
	}
	res.RSSPeak = res.RSSBefore
	client := newClient(cfg.Batches)
	defer client.CloseIdleConnections()
	header := requestHeader(nil)
	bctx, cancel := context.WithTimeout(ctx, cfg.Sleep+time.Minute)
	defer cancel()
	errs := make([]error, cfg.Batches)
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Batches {
		wg.Go(func() {
			var buf bytes.Buffer
			err := post(bctx, client, cfg.URL, header, bc.body, &buf)
			if err == nil {
				err = verify(buf.Bytes(), true, bc.want)
			}
			if err != nil {
				errs[i] = fmt.Errorf("batch %d: %w", i+1, err)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			res.Wall = time.Since(start)
			waiting = false
		case <-tick.C:
		}
		if rss, err := cfg.RSS(); err == nil {
			res.RSSPeak = max(res.RSSPeak, rss)
		}
	}
	for _, e := range errs {
		if e != nil {
			res.Failures = append(res.Failures, e)
		}
	}
	if len(res.Failures) > 0 {
		return res, fmt.Errorf("bench: in-flight: %w", errors.Join(res.Failures...))
	}
	return res, nil
}

// Verdicts judges the goals of the in-flight scenario: the peak resident
// memory within [GoalInFlightRSS] and every batch answered within
// [GoalInFlightSlack] of the sleep.
func (r InFlightResult) Verdicts() []Verdict {
	n := r.Batches * r.Calls
	mem := Verdict{
		Goal: fmt.Sprintf("%d calls in flight in one process: resident memory ≤ %d MB", n, GoalInFlightRSS/1_000_000),
		Got:  fmt.Sprintf("%.0f MB (%.0f MB before)", float64(r.RSSPeak)/1e6, float64(r.RSSBefore)/1e6),
		Pass: r.RSSPeak <= GoalInFlightRSS,
	}
	if mem.Pass {
		mem.Margin = fmt.Sprintf("%.0f MB to spare", float64(GoalInFlightRSS-r.RSSPeak)/1e6)
	} else {
		mem.Margin = fmt.Sprintf("missed by %.0f MB; %.1f KB per call in flight", float64(r.RSSPeak-GoalInFlightRSS)/1e6, float64(r.RSSPeak-r.RSSBefore)/1e3/float64(max(n, 1)))
	}
	return []Verdict{mem, r.wallVerdict()}
}

// wallVerdict judges that every batch was answered, rightly, within
// [GoalInFlightSlack] of the sleep.
func (r InFlightResult) wallVerdict() Verdict {
	extra := r.Wall - r.Sleep
	wall := Verdict{
		Goal: fmt.Sprintf("%d calls in flight answered within %s of the tools' %s", r.Batches*r.Calls, formatDuration(GoalInFlightSlack), formatDuration(r.Sleep)),
		Got:  formatDuration(r.Wall),
		Pass: extra <= GoalInFlightSlack && len(r.Failures) == 0,
	}
	switch {
	case len(r.Failures) > 0:
		wall.Margin = fmt.Sprintf("%d batches answered wrongly, first: %v", len(r.Failures), r.Failures[0])
	case wall.Pass:
		wall.Margin = formatDuration(GoalInFlightSlack-extra) + " to spare"
	default:
		wall.Margin = "missed by " + formatDuration(extra-GoalInFlightSlack)
	}
	return wall
}

// ReportInFlight writes r and its [InFlightResult.Verdicts] to w.
func ReportInFlight(w io.Writer, r InFlightResult) error {
	if _, err := fmt.Fprintf(w, "in flight: %d batches of %d sleep calls of %s sent at once to one process, measured from outside: answered in %s, resident memory %.0f → %.0f MB\n",
		r.Batches, r.Calls, formatDuration(r.Sleep), formatDuration(r.Wall), float64(r.RSSBefore)/1e6, float64(r.RSSPeak)/1e6); err != nil {
		return err
	}
	return writeVerdicts(w, r.Verdicts()...)
}
