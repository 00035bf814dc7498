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
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
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
	all          []*child
}

// child is one process of a bench, writing its output to files.
type child struct {
	name     string
	cmd      *exec.Cmd
	out, err string        // paths of its standard output and error
	done     chan struct{} // closed when the process has ended
	waitErr  error         // why it ended, once done is closed
	once     sync.Once
	stopErr  error
}

// start runs the command with args, its output in files named after name,
// and waits at most a minute for ready to match its standard output or
// error; it returns the match's first group.
func (cs *children) start(ctx context.Context, name string, ready *regexp.Regexp, args ...string) (*child, string, error) {
	c := &child{name: name, out: filepath.Join(cs.dir, name+".out"), err: filepath.Join(cs.dir, name+".err")}
	stdout, err := os.Create(c.out)
	if err != nil {
		return nil, "", err
	}
	defer stdout.Close()
	stderr, err := os.Create(c.err)
	if err != nil {
		return nil, "", err
	}
	defer stderr.Close()
	c.cmd = exec.Command(cs.command[0], append(cs.command[1:len(cs.command):len(cs.command)], args...)...)
	c.cmd.Env = append(os.Environ(), cs.env...)
	c.cmd.Stdout, c.cmd.Stderr = stdout, stderr
	if err := c.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("bench: start %s: %w", name, err)
	}
	c.done = make(chan struct{})
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()
	cs.mu.Lock()
	cs.all = append(cs.all, c)
	cs.mu.Unlock()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range []string{c.out, c.err} {
			b, _ := os.ReadFile(p)
			if m := ready.FindSubmatch(b); m != nil {
				return c, string(m[1]), nil
			}
		}
		select {
		case <-c.done:
			c.stop()
			return nil, "", fmt.Errorf("bench: %s ended before it was ready (%v); its output: %s", name, c.waitErr, c.tail())
		case <-timeout.C:
			c.stop()
			return nil, "", fmt.Errorf("bench: %s was not ready within a minute; its output: %s", name, c.tail())
		case <-ctx.Done():
			c.stop()
			return nil, "", ctx.Err()
		case <-tick.C:
		}
	}
}

// tail returns the end of the child's standard error.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.err)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// stop asks the child to stop, kills it when it has not after ten seconds,
// and returns why it ended if not at our request.
func (c *child) stop() error {
	c.once.Do(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
			err := c.waitErr
			var ee *exec.ExitError
			if errors.As(err, &ee) && !ee.Exited() {
				err = nil // ended by our signal
			}
			if err != nil {
				c.stopErr = fmt.Errorf("bench: %s ended with %w; its output: %s", c.name, err, c.tail())
			}
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
			c.stopErr = fmt.Errorf("bench: %s did not stop within 10s of SIGTERM and was killed", c.name)
		}
	})
	return c.stopErr
}

// stopAll stops every child, the last started first.
func (cs *children) stopAll() error {
	cs.mu.Lock()
	all := cs.all
	cs.all = nil
	cs.mu.Unlock()
	var errs []error
	for i := len(all) - 1; i >= 0; i-- {
		errs = append(errs, all[i].stop())
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
func (cs *children) startDev(ctx context.Context, name string, args ...string) (*child, string, error) {
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
		args := append(cs.command[1:len(cs.command):len(cs.command)], "bench", "load", "--url", cfg.URL, "--body", body,
			"--concurrency", fmt.Sprint(cfg.Concurrency), "--duration", cfg.Duration.String(), "--warmup", cfg.Warmup.String())
		// The round's own bound is its warmup, duration and the load's 5s
		// grace; a minute more covers a slow start.
		rctx, cancel := context.WithTimeout(ctx, cfg.Warmup+cfg.Duration+time.Minute)
		defer cancel()
		cmd := exec.CommandContext(rctx, cs.command[0], args...)
		cmd.Env = append(os.Environ(), cs.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return bench.Result{}, fmt.Errorf("load generator: %w: %s", err, strings.TrimSpace(stderr.String()))
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
	fmt.Fprintf(out, "in flight: toolbus dev %s, pid %d\n", strings.Join(args, " "), c.cmd.Process.Pid)
	r, err := bench.InFlight(ctx, bench.InFlightConfig{URL: u, Batches: f.inflightBatches, Calls: f.inflightCalls,
		Sleep: f.inflightSleep, RSS: func() (uint64, error) { return processRSS(c.cmd.Process.Pid) }})
	bench.ReportInFlight(out, r)
	return err
}
