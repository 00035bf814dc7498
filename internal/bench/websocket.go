package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/toolbus/toolbus/client"
)

// WebSocketConfig says what [WebSocket] sends.
type WebSocketConfig struct {
	// HTTPURL and WSURL are the same ingress endpoint, for example
	// http://127.0.0.1:8080/rpc and ws://127.0.0.1:8080/rpc. Required.
	HTTPURL, WSURL string
	// Concurrency is the number of callers, each with one echo call in
	// flight at a time. Over WebSocket they all share one connection; over
	// HTTP they share a client that keeps one connection per caller.
	// Default 64.
	Concurrency int
	// Rounds is how many times each transport runs, alternating, HTTP
	// first. Default 3.
	Rounds int
	// Duration is the measured length of one round. Default 2s.
	Duration time.Duration
	// Warmup precedes every round. Default 250ms; a negative value means
	// none.
	Warmup time.Duration
	// Progress, when not nil, is planned for every round of both
	// transports and counts their calls. Optional.
	Progress *Progress
}

// WebSocketResult is what [WebSocket] measured: one [Side] per transport,
// its rounds merged as [Compare] merges them.
type WebSocketResult struct {
	Concurrency int
	HTTP, WS    Side
	// Ratio is WebSocket's throughput over HTTP's; 0 when HTTP answered
	// nothing.
	Ratio float64
	// AddedMean is WebSocket's mean latency minus HTTP's.
	AddedMean time.Duration
}

// WebSocket compares many calls over one WebSocket connection with the
// same calls over HTTP, through package client: cfg.Concurrency callers
// send echo calls of {"n": caller} in a closed loop, and every answer must
// be the caller's own params. Each round opens a new client, so a
// WebSocket round starts with one fresh connection (dialed before the
// round, outside its measurement).
func WebSocket(ctx context.Context, cfg WebSocketConfig) (WebSocketResult, error) {
	if err := checkURL(cfg.HTTPURL); err != nil {
		return WebSocketResult{}, fmt.Errorf("bench: websocket: %w", err)
	}
	if u, err := url.Parse(cfg.WSURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return WebSocketResult{}, fmt.Errorf("bench: websocket: URL %q is not an absolute ws or wss URL", cfg.WSURL)
	}
	if cfg.Concurrency < 0 || cfg.Rounds < 0 || cfg.Duration < 0 {
		return WebSocketResult{}, errors.New("bench: websocket concurrency, rounds and duration must not be negative")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 64
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	cfg.Warmup = warmup(cfg.Warmup)
	cfg.Progress.planTime(time.Duration(cfg.Rounds*2)*(cfg.Warmup+cfg.Duration), "req")
	sides := []Target{{Name: "HTTP", URL: cfg.HTTPURL}, {Name: "WebSocket", URL: cfg.WSURL}}
	rounds := make([][]Result, len(sides))
	for range cfg.Rounds {
		for i, t := range sides {
			r, err := echoRound(ctx, t.URL, cfg)
			if err != nil {
				return WebSocketResult{}, fmt.Errorf("bench: websocket: %s: %w", t.Name, err)
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	res := WebSocketResult{
		Concurrency: cfg.Concurrency,
		HTTP:        mergeRounds(sides[0], rounds[0]),
		WS:          mergeRounds(sides[1], rounds[1]),
	}
	res.AddedMean = res.WS.Result.Mean - res.HTTP.Result.Mean
	if res.HTTP.Result.Throughput > 0 {
		res.Ratio = res.WS.Result.Throughput / res.HTTP.Result.Throughput
	}
	var errs []error
	for _, s := range []Side{res.HTTP, res.WS} {
		if s.Result.Errors > 0 {
			errs = append(errs, fmt.Errorf("bench: websocket: %s: %d errors, first: %w", s.Target.Name, s.Result.Errors, s.Result.FirstError))
		}
	}
	return res, errors.Join(errs...)
}

// echoRound runs one round of echo calls through a new client of rawURL.
func echoRound(ctx context.Context, rawURL string, cfg WebSocketConfig) (Result, error) {
	hc := newClient(cfg.Concurrency)
	defer hc.CloseIdleConnections()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, rawURL, client.WithHTTPClient(hc))
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	type echo struct {
		N int `json:"n"`
	}
	return Loop(ctx, LoopConfig{Concurrency: cfg.Concurrency, Duration: cfg.Duration, Warmup: cfg.Warmup, progress: cfg.Progress},
		func(ctx context.Context, worker int) error {
			var got echo
			if err := c.Call(ctx, "echo", echo{N: worker}, &got); err != nil {
				return err
			}
			if got.N != worker {
				return fmt.Errorf("%w: echo of {\"n\":%d} answered {\"n\":%d}", ErrWrongAnswer, worker, got.N)
			}
			return nil
		})
}
