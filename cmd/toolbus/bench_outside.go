package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/internal/proc"
)

// The targets --targets may name, in the order they run.
var outsideTargets = []struct{ key, name string }{
	{"plain", bench.TargetPlain},
	{"proxy", bench.TargetProxy},
	{"dev", bench.TargetDev},
	{"split", bench.TargetSplit},
	{"batch", bench.TargetBatch},
	{"dev-access-log", bench.TargetDevAccessLog},
	{"dev-bus", bench.TargetDevBus},
	{"batch-bus", bench.TargetBatchBus},
}

// newBenchLoadCmd is the load generator `toolbus bench` runs as a process
// of its own for each round: it prints the round's [bench.Result] as JSON.
func newBenchLoadCmd() *cobra.Command {
	var (
		cfg      bench.LoadConfig
		bodyFile string
	)
	cmd := &cobra.Command{
		Use:    "load",
		Short:  "Run one closed-loop load round and print its result as JSON",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := os.ReadFile(bodyFile)
			if err != nil {
				return fmt.Errorf("bench load: --body: %w", err)
			}
			cfg.Body = body
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			res, err := bench.Load(ctx, cfg)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "url", "", "where requests are POSTed")
	f.StringVar(&bodyFile, "body", "", "file holding the JSON-RPC request to send")
	f.IntVar(&cfg.Concurrency, "concurrency", 1, "concurrent clients")
	f.DurationVar(&cfg.Duration, "duration", time.Second, "measured length of the round")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured load before the round")
	return cmd
}

// newBenchServeCmd runs a baseline target of `toolbus bench` as a process
// of its own: the plain echo handler, or a reverse proxy to one.
func newBenchServeCmd() *cobra.Command {
	var kind, to string
	cmd := &cobra.Command{
		Use:    "serve",
		Short:  "Serve the plain echo handler or a reverse proxy on a free loopback port",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var h http.Handler
			switch kind {
			case "plain":
				h = bench.PlainEcho()
			case "proxy":
				u, err := url.Parse(to)
				if err != nil || u.Host == "" {
					return fmt.Errorf("bench serve: --to %q: want an http URL", to)
				}
				p := httputil.NewSingleHostReverseProxy(u)
				// As many idle connections to the backend as clients,
				// like any proxy tuned for one backend.
				p.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1024}
				h = p
			default:
				return fmt.Errorf("bench serve: --kind %q: want plain or proxy", kind)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			// It runs until it is killed, as a child of the bench does.
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "toolbus bench serve ready: http://%s/\n", l.Addr())
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "plain", "plain or proxy")
	cmd.Flags().StringVar(&to, "to", "", "the proxy's backend URL")
	return cmd
}

// children starts the processes of a bench and stops them all.
type children struct {
	command, env []string
	dir          string
	mu           sync.Mutex
	all          []*proc.Process
}

// start runs the command with args, names it name, and waits at most a
// minute for ready, which has one group, to match a line of its standard
// output or error; it returns the match's group.
func (cs *children) start(ctx context.Context, name string, ready *regexp.Regexp, args ...string) (*proc.Process, string, error) {
	p, err := proc.Start(ctx, proc.Spec{Name: name, Command: append(cs.command[:len(cs.command):len(cs.command)], args...),
		Env: cs.env, Ready: ready, ReadyWithin: time.Minute, StopWithin: 10 * time.Second})
	if err != nil {
		return nil, "", fmt.Errorf("bench: %w", err)
	}
	cs.mu.Lock()
	cs.all = append(cs.all, p)
	cs.mu.Unlock()
	return p, p.Ready()[1], nil
}

// stopAll stops every child, the last started first.
func (cs *children) stopAll() error {
	cs.mu.Lock()
	all := cs.all
	cs.all = nil
	cs.mu.Unlock()
	var errs []error
	for i := len(all) - 1; i >= 0; i-- {
		if err := all[i].Stop(); err != nil {
			errs = append(errs, fmt.Errorf("bench: %w", err))
		}
	}
	return errors.Join(errs...)
}

var (
	serveReadyLine   = regexp.MustCompile(`toolbus bench serve ready: (http://\S+/)`)
	natsChildReady   = regexp.MustCompile(`toolbus nats ready: (nats://\S+)`)
	ingressReadyLine = regexp.MustCompile(`"msg":"ingress ready","url":"(http://[^"]+)"`)
	workerReadyLine  = regexp.MustCompile(`"msg":"(worker) ready"`)
)

// startDev starts a `toolbus dev` child with extra args and returns its URL.
func (cs *children) startDev(ctx context.Context, name string, args ...string) (*proc.Process, string, error) {
	base := []string{"--log-level", "info", "--log-format", "json", "dev", "--listen", "127.0.0.1:0",
		"--nats-listen", "", "--data", filepath.Join(cs.dir, name+"-data")}
	return cs.start(ctx, name, devReadyLine, append(base, args...)...)
}

// startTargets starts the processes of the targets keys names and returns
// the targets, in the order of [outsideTargets].
func (cs *children) startTargets(ctx context.Context, keys []string) ([]bench.Target, error) {
	want := map[string]bool{}
	for _, k := range keys {
		if !slicesContainsKey(k) {
			return nil, fmt.Errorf("--targets %q: want some of plain, proxy, dev, split, batch, dev-access-log, dev-bus, batch-bus", k)
		}
		want[k] = true
	}
	var targets []bench.Target
	var plainURL, devURL string
	if want["plain"] || want["proxy"] {
		_, u, err := cs.start(ctx, "plain", serveReadyLine, "bench", "serve", "--kind", "plain")
		if err != nil {
			return nil, err
		}
		plainURL = u
		if want["plain"] {
			targets = append(targets, bench.Target{Name: bench.TargetPlain, URL: u})
		}
	}
	if want["proxy"] {
		_, u, err := cs.start(ctx, "proxy", serveReadyLine, "bench", "serve", "--kind", "proxy", "--to", plainURL)
		if err != nil {
			return nil, err
		}
		targets = append(targets, bench.Target{Name: bench.TargetProxy, URL: u})
	}
	if want["dev"] || want["batch"] {
		_, u, err := cs.startDev(ctx, "dev")
		if err != nil {
			return nil, err
		}
		devURL = u
		if want["dev"] {
			targets = append(targets, bench.Target{Name: bench.TargetDev, URL: u})
		}
	}
	if want["split"] {
		token := rand.Text()
		_, natsURL, err := cs.start(ctx, "nats", natsChildReady, "--log-level", "warn", "nats", "--nats-listen", "127.0.0.1:0",
			"--data", filepath.Join(cs.dir, "nats-data"), "--nats-token", token)
		if err != nil {
			return nil, err
		}
		if _, _, err := cs.start(ctx, "worker", workerReadyLine, "--log-level", "info", "--log-format", "json", "worker",
			"--nats", natsURL, "--nats-token", token, "--metrics-listen", ""); err != nil {
			return nil, err
		}
		_, u, err := cs.start(ctx, "ingress", ingressReadyLine, "--log-level", "info", "--log-format", "json", "ingress",
			"--nats", natsURL, "--nats-token", token, "--listen", "127.0.0.1:0", "--auth", "off")
		if err != nil {
			return nil, err
		}
		targets = append(targets, bench.Target{Name: bench.TargetSplit, URL: u})
	}
	if want["batch"] {
		targets = append(targets, bench.Target{Name: bench.TargetBatch, URL: devURL, Body: bench.EchoBatch(bench.BatchCalls)})
	}
	if want["dev-access-log"] {
		_, u, err := cs.startDev(ctx, "dev-access-log", "--access-log")
		if err != nil {
			return nil, err
		}
		targets = append(targets, bench.Target{Name: bench.TargetDevAccessLog, URL: u})
	}
	if want["dev-bus"] || want["batch-bus"] {
		_, u, err := cs.startDev(ctx, "dev-bus", "--local-calls=false")
		if err != nil {
			return nil, err
		}
		if want["dev-bus"] {
			targets = append(targets, bench.Target{Name: bench.TargetDevBus, URL: u})
		}
		if want["batch-bus"] {
			targets = append(targets, bench.Target{Name: bench.TargetBatchBus, URL: u, Body: bench.EchoBatch(bench.BatchCalls)})
		}
	}
	for _, t := range targets {
		if err := waitAnswers(ctx, t); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

func slicesContainsKey(k string) bool {
	for _, t := range outsideTargets {
		if t.key == k {
			return true
		}
	}
	return false
}

// waitAnswers sends t's request until it is answered with a result for
// every id, at most a minute: a worker that joined over TCP announces its
// tools a moment after the ingress is ready.
func waitAnswers(ctx context.Context, t bench.Target) error {
	body := []byte(t.Body)
	if t.Body == "" {
		body = []byte(bench.EchoRequest)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := bench.Load(ctx, bench.LoadConfig{URL: t.URL, Body: body, Duration: time.Millisecond})
		if err != nil {
			return err
		}
		if res.Requests > 0 && res.Errors == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s answered no echo within a minute: %v", t.Name, res.FirstError)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// childLoad returns a [bench.CompareConfig] Load that runs each round in a
// load generator process of its own.
func (cs *children) childLoad() func(context.Context, bench.LoadConfig) (bench.Result, error) {
	var n int
	return func(ctx context.Context, cfg bench.LoadConfig) (bench.Result, error) {
		n++
		body := filepath.Join(cs.dir, fmt.Sprintf("body-%d.json", n))
		if err := os.WriteFile(body, cfg.Body, 0o600); err != nil {
			return bench.Result{}, err
		}
		defer os.Remove(body)
		command := append(cs.command[:len(cs.command):len(cs.command)], "bench", "load", "--url", cfg.URL, "--body", body,
			"--concurrency", fmt.Sprint(cfg.Concurrency), "--duration", cfg.Duration.String(), "--warmup", cfg.Warmup.String())
		// The round's own bound is its warmup, duration and the load's 5s
		// grace; a minute more covers a slow start.
		rctx, cancel := context.WithTimeout(ctx, cfg.Warmup+cfg.Duration+time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		p, err := proc.Start(rctx, proc.Spec{Name: "load generator", Command: command, Env: cs.env, Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			return bench.Result{}, fmt.Errorf("bench: %w", err)
		}
		if err := p.Wait(); err != nil {
			return bench.Result{}, fmt.Errorf("load generator: %w: %s", errors.Join(err, rctx.Err()), strings.TrimSpace(stderr.String()))
		}
		var res bench.Result
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			return bench.Result{}, fmt.Errorf("load generator's result: %w", err)
		}
		return res, nil
	}
}

// runOutside runs the echo comparison measured from outside and reports it
// on out.
func runOutside(ctx context.Context, out io.Writer, p *bench.Progress, f benchFlags) (err error) {
	cs, err := newChildren(f)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cs.stopAll(), os.RemoveAll(cs.dir)) }()
	targets, err := cs.startTargets(ctx, f.targets)
	if err != nil {
		return err
	}
	rows, err := bench.Matrix(ctx, targets, bench.CompareConfig{Concurrency: f.concurrency, Rounds: f.rounds,
		Duration: f.duration, Load: cs.childLoad(), Progress: p})
	p.Stop()
	if len(rows) > 0 {
		bench.ReportMatrix(out, rows)
	}
	return err
}

// benchChildEnv marks the processes a bench starts. A process that has it
// refuses to start children of its own: were the program that a bench
// starts not the toolbus command (a test binary, say), it could otherwise
// start benches of its own, and they more, without end.
const benchChildEnv = "TOOLBUS_BENCH_CHILD"

// newChildren prepares to start children of this program (or --binary).
func newChildren(f benchFlags) (*children, error) {
	if os.Getenv(benchChildEnv) != "" {
		return nil, fmt.Errorf("bench: this process was started by a bench (%s is set) and starts no processes of its own", benchChildEnv)
	}
	command := f.command
	if len(command) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: cannot find this program to start its targets (%w): give --binary", err)
		}
		command = []string{self}
	}
	dir, err := os.MkdirTemp("", "toolbus-bench-")
	if err != nil {
		return nil, err
	}
	return &children{command: command, env: []string{benchChildEnv + "=1"}, dir: dir}, nil
}

// runInFlight starts a `toolbus dev` child that admits the calls of the
// in-flight scenario, runs it, and reports it on out.
func runInFlight(ctx context.Context, out io.Writer, f benchFlags) (err error) {
	cs, err := newChildren(f)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cs.stopAll(), os.RemoveAll(cs.dir)) }()
	n := f.inflightBatches * f.inflightCalls
	args := []string{"--concurrency", fmt.Sprint(n + 2000), "--batch-concurrency", fmt.Sprint(f.inflightCalls),
		"--max-in-flight", fmt.Sprint(n + 2000)}
	c, u, err := cs.startDev(ctx, "dev-inflight", args...)
	if err != nil {
		return err
	}
	if err := waitAnswers(ctx, bench.Target{Name: "toolbus dev " + strings.Join(args, " "), URL: u}); err != nil {
		return err
	}
	fmt.Fprintf(out, "in flight: toolbus dev %s, pid %d\n", strings.Join(args, " "), c.Pid())
	r, err := bench.InFlight(ctx, bench.InFlightConfig{URL: u, Batches: f.inflightBatches, Calls: f.inflightCalls,
		Sleep: f.inflightSleep, RSS: func() (uint64, error) { return processRSS(c.Pid()) }})
	bench.ReportInFlight(out, r)
	return err
}
