package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

// JobsConfig says what [Jobs] sends.
type JobsConfig struct {
	// URL is the toolbus ingress's JSON-RPC endpoint, serving rpc.jobs.*.
	// Required.
	URL string
	// Method is the tool every job runs; it should be fast, so that the
	// measurement is of the job machinery. Its params are {"n": N}.
	// Default "echo".
	Method string
	// Concurrency is the number of submitters, each with one
	// rpc.jobs.submit in flight at a time. Default 16.
	Concurrency int
	// PollConcurrency is the number of pollers of one finished job, each
	// with one rpc.jobs.get in flight at a time. Default 1, which measures
	// the latency of a poll on an idle cluster.
	PollConcurrency int
	// Duration is how long each phase, polling then submitting, is
	// measured. Default 2s.
	Duration time.Duration
	// Warmup precedes each phase. Default 250ms; a negative value means
	// none.
	Warmup time.Duration
	// Drain bounds how long Jobs waits, after submitting, for the last job
	// of every submitter to succeed. Default 60s.
	Drain time.Duration
	// Progress, when not nil, is planned for the measured time of both
	// phases (not the drain) and counts their calls. Optional.
	Progress *Progress
}

// JobsResult is what [Jobs] measured.
type JobsResult struct {
	Method string
	// Poll measured rpc.jobs.get of one finished job.
	Poll Result
	// Submit measured rpc.jobs.submit: its Throughput is submits per
	// second.
	Submit Result
	// Jobs is how many jobs were submitted, warmup included.
	Jobs int64
	// Drained is how long after the last submit the last job of every
	// submitter had succeeded; zero when they did not within the drain
	// bound.
	Drained time.Duration
	// RunRate is Jobs over the time from the first submit until Drained:
	// how fast the cluster ran the jobs end to end. Zero when not drained.
	RunRate float64
}

// Jobs measures toolbus's durable jobs through package client. It first
// submits one job, waits until it has succeeded and runs a closed loop of
// rpc.jobs.get of it, checking each record; then it runs a closed loop of
// rpc.jobs.submit of cfg.Method jobs, checking each answer names a queued
// job, and waits for the last job of every submitter to succeed.
//
// The result is returned whatever happened; the error says what went
// wrong (a phase with errors, jobs that did not succeed, ctx ending).
func Jobs(ctx context.Context, cfg JobsConfig) (JobsResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return JobsResult{}, fmt.Errorf("bench: jobs: %w", err)
	}
	if cfg.Concurrency < 0 || cfg.PollConcurrency < 0 || cfg.Duration < 0 || cfg.Drain < 0 {
		return JobsResult{}, errors.New("bench: jobs concurrency, duration and drain must not be negative")
	}
	if cfg.Method == "" {
		cfg.Method = "echo"
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.PollConcurrency == 0 {
		cfg.PollConcurrency = 1
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	cfg.Warmup = warmup(cfg.Warmup)
	if cfg.Drain == 0 {
		cfg.Drain = time.Minute
	}
	hc := newClient(max(cfg.Concurrency, cfg.PollConcurrency))
	defer hc.CloseIdleConnections()
	c, err := client.New(cfg.URL, client.WithHTTPClient(hc))
	if err != nil {
		return JobsResult{}, fmt.Errorf("bench: jobs: %w", err)
	}
	defer c.Close()

	cfg.Progress.planTime(2*(cfg.Warmup+cfg.Duration), "req")
	res := JobsResult{Method: cfg.Method}
	if res.Poll, err = pollJob(ctx, c, cfg); err != nil {
		return res, fmt.Errorf("bench: jobs: %w", err)
	}
	if err := submitJobs(ctx, c, cfg, &res); err != nil {
		return res, fmt.Errorf("bench: jobs: %w", err)
	}
	return res, nil
}

// pollJob measures rpc.jobs.get of a job that has succeeded.
func pollJob(ctx context.Context, c *client.Client, cfg JobsConfig) (Result, error) {
	var sub schema.JobSubmitResult
	if err := c.Call(ctx, schema.MethodJobsSubmit, map[string]any{"method": cfg.Method, "params": map[string]int{"n": 0}}, &sub); err != nil {
		return Result{}, fmt.Errorf("submit the job to poll: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Drain)
	defer cancel()
	if err := waitSucceeded(wctx, c, sub.ID); err != nil {
		return Result{}, err
	}
	params := map[string]string{"id": sub.ID}
	res, err := Loop(ctx, LoopConfig{Concurrency: cfg.PollConcurrency, Duration: cfg.Duration, Warmup: cfg.Warmup, progress: cfg.Progress},
		func(ctx context.Context, _ int) error {
			var rec schema.JobRecord
			if err := c.Call(ctx, schema.MethodJobsGet, params, &rec); err != nil {
				return err
			}
			if rec.ID != sub.ID || rec.State != schema.JobSucceeded {
				return fmt.Errorf("%w: rpc.jobs.get of %s answered job %q %s", ErrWrongAnswer, sub.ID, rec.ID, rec.State)
			}
			return nil
		})
	if err == nil && res.Errors > 0 {
		err = fmt.Errorf("poll: %d errors, first: %w", res.Errors, res.FirstError)
	}
	return res, err
}

// submitJobs measures rpc.jobs.submit and waits for the jobs to run.
func submitJobs(ctx context.Context, c *client.Client, cfg JobsConfig, res *JobsResult) error {
	last := make([]string, cfg.Concurrency)
	var n atomic.Int64
	start := time.Now()
	var err error
	res.Submit, err = Loop(ctx, LoopConfig{Concurrency: cfg.Concurrency, Duration: cfg.Duration, Warmup: cfg.Warmup, progress: cfg.Progress},
		func(ctx context.Context, worker int) error {
			var sub schema.JobSubmitResult
			params := map[string]any{"method": cfg.Method, "params": map[string]int64{"n": n.Add(1)}}
			if err := c.Call(ctx, schema.MethodJobsSubmit, params, &sub); err != nil {
				return err
			}
			if sub.ID == "" || !(sub.State == schema.JobQueued || sub.State == schema.JobRunning || sub.State.Final()) {
				return fmt.Errorf("%w: rpc.jobs.submit answered job %q %q", ErrWrongAnswer, sub.ID, sub.State)
			}
			last[worker] = sub.ID
			return nil
		})
	submitted := time.Now()
	res.Jobs = n.Load()
	if err != nil {
		return err
	}
	if res.Submit.Errors > 0 {
		return fmt.Errorf("submit: %d errors, first: %w", res.Submit.Errors, res.Submit.FirstError)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Drain)
	defer cancel()
	for _, id := range last {
		if id == "" {
			continue
		}
		if err := waitSucceeded(wctx, c, id); err != nil {
			return err
		}
	}
	done := time.Now()
	res.Drained = done.Sub(submitted)
	if d := done.Sub(start); d > 0 {
		res.RunRate = float64(res.Jobs) / d.Seconds()
	}
	return nil
}

// jobPollInterval is how often waitSucceeded polls a job.
const jobPollInterval = 10 * time.Millisecond

// waitSucceeded polls job id until it ends, and returns an error unless it
// succeeded.
func waitSucceeded(ctx context.Context, c *client.Client, id string) error {
	tick := time.NewTicker(jobPollInterval)
	defer tick.Stop()
	for {
		var rec schema.JobRecord
		if err := c.Call(ctx, schema.MethodJobsGet, map[string]string{"id": id}, &rec); err != nil {
			return fmt.Errorf("poll job %s: %w", id, err)
		}
		switch {
		case rec.State == schema.JobSucceeded:
			return nil
		case rec.State.Final():
			msg := string(rec.State)
			if rec.Error != nil {
				msg += ": " + rec.Error.Error()
			}
			return fmt.Errorf("%w: job %s (%s) %s", ErrWrongAnswer, id, rec.Method, msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s still %s: %w", id, rec.State, ctx.Err())
		case <-tick.C:
		}
	}
}
