package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LoopConfig says how hard and for how long [Loop] runs.
type LoopConfig struct {
	// Concurrency is the number of workers, each with one operation in
	// flight at a time. Default 1.
	Concurrency int
	// Duration is how long operations are measured. Default 1s.
	Duration time.Duration
	// Warmup runs the same loop before Duration without measuring it.
	// Default 0.
	Warmup time.Duration
	// Grace bounds how long operations still running when Duration ends
	// may take; the context of one still running then ends and it counts
	// as an error. Default 5s.
	Grace time.Duration

	// progress counts every operation that ends, warmup included. It is
	// set by the scenarios of this package, which plan it for all their
	// loops together.
	progress *Progress
}

// Op is one operation of [Loop], run by worker number worker (0 to
// Concurrency-1), so that an operation can keep per-worker state without
// locks. It returns nil when the operation did what it should; ctx ends
// when the loop's grace has passed.
type Op func(ctx context.Context, worker int) error

// Loop runs a closed loop of op, as [Load] does of HTTP requests:
// Concurrency workers each run op, wait for it, and run it again, until
// Warmup and Duration have passed; then the operations in flight get at
// most Grace. Every operation that ends within Warmup is left out; the
// Result counts the others, successes and errors apart, and holds the
// latencies of the successes. It stops early when ctx ends, returning what
// it measured with ctx's error.
func Loop(ctx context.Context, cfg LoopConfig, op Op) (Result, error) {
	if cfg.Concurrency < 0 || cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Grace < 0 {
		return Result{}, errors.New("bench: loop concurrency and durations must not be negative")
	}
	if op == nil {
		return Result{}, errors.New("bench: loop: nil operation")
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
	res := runLoop(ctx, cfg.Concurrency, cfg.Warmup, cfg.Duration, cfg.Grace, cfg.progress, func(runCtx context.Context, i int) func() error {
		return func() error { return op(runCtx, i) }
	})
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: loop: %w", err)
	}
	return res, nil
}

// runLoop runs concurrency workers, each calling the function newCall
// makes for it until warmup and duration have passed, and merges what they
// measured. The context given to newCall ends grace after the measured
// time. Every call that ends is counted on progress.
func runLoop(ctx context.Context, concurrency int, warmup, duration, grace time.Duration, progress *Progress, newCall func(runCtx context.Context, worker int) func() error) Result {
	from := time.Now().Add(warmup)
	end := from.Add(duration)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(grace))
	defer cancel()

	workers := make([]loopWorker, concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		w.hist = new(histogram)
		w.progress = progress
		call := newCall(runCtx, i)
		wg.Go(func() { w.run(runCtx, from, end, call) })
	}
	wg.Wait()

	res := Result{Concurrency: concurrency, Elapsed: max(time.Since(from), 0), hist: new(histogram)}
	for i := range workers {
		w := &workers[i]
		res.Requests += w.ok
		res.Errors += w.errs
		if res.FirstError == nil {
			res.FirstError = w.firstErr
		}
		res.hist.merge(w.hist)
	}
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Requests) / res.Elapsed.Seconds()
	}
	res.setLatencies()
	return res
}

// loopWorker is one closed loop and what it counted.
type loopWorker struct {
	hist     *histogram
	progress *Progress
	ok, errs int64
	firstErr error
}

func (w *loopWorker) run(ctx context.Context, from, end time.Time, call func() error) {
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(end) {
			return
		}
		err := call()
		done := time.Now()
		w.progress.add(1)
		if done.Before(from) {
			continue // warmup
		}
		if err != nil {
			w.errs++
			if w.firstErr == nil {
				w.firstErr = err
			}
			continue
		}
		w.ok++
		w.hist.record(done.Sub(start))
	}
}
