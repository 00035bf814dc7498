package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// LoadConfig says what [Load] sends, how hard and for how long.
type LoadConfig struct {
	// URL is where requests are POSTed. Required.
	URL string
	// Body is the JSON-RPC request sent each time: a single request or a
	// batch, with at least one id. Every id must be answered with a result.
	// Required.
	Body []byte
	// Header is added to every request (for example Toolbus-Timeout); the
	// content type is always application/json. Optional.
	Header http.Header
	// Concurrency is the number of workers, each with one request in flight
	// at a time. Default 1.
	Concurrency int
	// Duration is how long answers are measured. Default 1s.
	Duration time.Duration
	// Warmup runs the same load before Duration without measuring it, so
	// that connections are open and caches warm. Default 0.
	Warmup time.Duration
	// Grace bounds how long requests still in flight when Duration ends may
	// take to answer; one unanswered by then is canceled and counted as an
	// error. Default 5s.
	Grace time.Duration
	// Client sends the requests. Default: a client of its own keeping
	// Concurrency connections alive, without proxy, closed when Load returns.
	Client *http.Client

	// progress counts every request that ends, as [LoopConfig]'s does.
	progress *Progress
}

// Result is what [Load] measured. Only answers that arrived during the
// measured Duration (or its grace) count.
type Result struct {
	// Concurrency is the number of workers that ran.
	Concurrency int
	// Requests is the number of requests answered with a result for every
	// id; Errors the number that were not (a transport error, an HTTP
	// status other than 200, a JSON-RPC error, a wrong or missing id). The
	// two never overlap.
	Requests, Errors int64
	// FirstError is an example of what went wrong, nil when Errors is 0.
	FirstError error
	// Elapsed is the measured time: from the end of the warmup until the
	// last worker stopped.
	Elapsed time.Duration
	// Throughput is Requests per second of Elapsed.
	Throughput float64
	// Mean, P50, P90, P99 and Max are latencies of the successful requests,
	// within 1% (Mean and Max are exact).
	Mean, P50, P90, P99, Max time.Duration

	hist *histogram
}

func (r *Result) setLatencies() {
	r.Mean = r.hist.mean()
	r.P50 = r.hist.quantile(0.50)
	r.P90 = r.hist.quantile(0.90)
	r.P99 = r.hist.quantile(0.99)
	r.Max = r.hist.quantile(1)
}

// Load runs a closed loop: Concurrency workers each POST Body to URL, wait
// for the answer, check it, and send again, until Warmup and Duration have
// passed; then it waits at most Grace for the requests in flight. It stops
// early when ctx ends, returning what it measured so far with ctx's error.
// Memory does not grow with the length of the run.
func Load(ctx context.Context, cfg LoadConfig) (Result, error) {
	want, batch, err := cfg.check()
	if err != nil {
		return Result{}, err
	}
	client := cfg.Client
	if client == nil {
		client = newClient(cfg.Concurrency)
		defer client.CloseIdleConnections()
	}
	header := requestHeader(cfg.Header)

	res := runLoop(ctx, cfg.Concurrency, cfg.Warmup, cfg.Duration, cfg.Grace, cfg.progress, func(runCtx context.Context, _ int) func() error {
		var buf bytes.Buffer
		return func() error {
			if err := post(runCtx, client, cfg.URL, header, cfg.Body, &buf); err != nil {
				return err
			}
			return verify(buf.Bytes(), batch, want)
		}
	})
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: load %s: %w", cfg.URL, err)
	}
	return res, nil
}

// check validates cfg, fills in its defaults, and returns what every answer
// must hold.
func (cfg *LoadConfig) check() (want []expectation, batch bool, err error) {
	if err := checkURL(cfg.URL); err != nil {
		return nil, false, fmt.Errorf("bench: load: %w", err)
	}
	if cfg.Concurrency < 0 || cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Grace < 0 {
		return nil, false, errors.New("bench: load concurrency and durations must not be negative")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Duration == 0 {
		cfg.Duration = time.Second
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	items, batch, perr := schema.Parse(cfg.Body, schema.Limits{})
	if perr != nil {
		return nil, false, fmt.Errorf("bench: load body: %w", perr)
	}
	for _, it := range items {
		if it.Err != nil {
			return nil, false, fmt.Errorf("bench: load body: %w", it.Err)
		}
		if it.Request.IsNotification() {
			continue
		}
		for _, e := range want {
			if bytes.Equal(e.id, it.Request.ID) {
				return nil, false, fmt.Errorf("bench: load body: id %s appears twice", it.Request.ID)
			}
		}
		want = append(want, expectation{id: it.Request.ID, check: anyResult})
	}
	if len(want) == 0 {
		return nil, false, errors.New("bench: load body has no id to answer")
	}
	return want, batch, nil
}
