package bench

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

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/internal/proc"
)

// The targets --targets may name, in the order they run.
var outsideTargets = []struct{ key, name string }{
	{"plain", TargetPlain},
	{"proxy", TargetProxy},
	{"dev", TargetDev},
	{"split", TargetSplit},
	{"batch", TargetBatch},
	{"dev-access-log", TargetDevAccessLog},
	{"dev-bus", TargetDevBus},
	{"batch-bus", TargetBatchBus},
}

// LoadChild is the load generator [Run] starts as a process of its own
// for each round (the hidden `toolbus bench load`): it runs one [Load]
// round of cfg with the request in bodyFile and prints its [Result] on out
// as JSON.
func LoadChild(ctx context.Context, out io.Writer, cfg LoadConfig, bodyFile string) error {
	body, err := os.ReadFile(bodyFile)
	if err != nil {
		return fmt.Errorf("bench load: --body: %w", err)
	}
	cfg.Body = body
	res, err := Load(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(res)
}

// ServeChild serves a baseline target of [Run] as a process of its own
// (the hidden `toolbus bench serve`) on a free loopback port, until it is
// killed: kind "plain" is the plain echo handler, "proxy" a reverse proxy
// to the URL to. It prints its URL on out once it listens.
func ServeChild(out io.Writer, kind, to string) error {
	var h http.Handler
	switch kind {
	case "plain":
		h = PlainEcho()
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
	fmt.Fprintf(out, "toolbus bench serve ready: http://%s/\n", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// children starts the processes of a bench and stops them all.
type children struct {
	// command starts the targets, load the load generators: the same
	// program, under taskset when pinned.
	command, load, env []string
	dir                string
	mu                 sync.Mutex
	all                []*proc.Process
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

// The lines the children print once they serve, each with one group: a
// URL, or the word worker.
var (
	serveReadyLine = regexp.MustCompile(`toolbus bench serve ready: (http://\S+/)`)
	natsChildReady = regexp.MustCompile(`toolbus nats ready: (nats://\S+)`)
	// IngressReadyLine is the log line in JSON of `toolbus ingress` ready
	// to serve; its group is the URL.
	IngressReadyLine = regexp.MustCompile(`"msg":"ingress ready","url":"(http://[^"]+)"`)
	// WorkerReadyLine is the log line in JSON of `toolbus worker` ready to
	// serve.
	WorkerReadyLine = regexp.MustCompile(`"msg":"(worker) ready"`)
)

// split is a split deployment started by [children.startSplit]: its three
// processes, and the URL of its ingress.
type split struct {
	nats, worker, ingress *proc.Process
	url                   string
}

// startSplit starts the split deployment on loopback TCP: `toolbus nats`
// with a new token and its store in the children's directory, then a
// `toolbus worker` of the demo tools with workerArgs added, then a
// `toolbus ingress` with ingressArgs added, each once the last is ready.
// It does not wait for the worker's tools to reach the ingress
// ([waitAnswers] does).
func (cs *children) startSplit(ctx context.Context, workerArgs, ingressArgs []string) (split, error) {
	var sp split
	token := rand.Text()
	nats, natsURL, err := cs.start(ctx, "nats", natsChildReady, "--log-level", "warn", "nats", "--nats-listen", "127.0.0.1:0",
		"--data", filepath.Join(cs.dir, "nats-data"), "--nats-token", token)
	if err != nil {
		return sp, err
	}
	worker, _, err := cs.start(ctx, "worker", WorkerReadyLine, append([]string{"--log-level", "info", "--log-format", "json", "worker",
		"--nats", natsURL, "--nats-token", token, "--metrics-listen", ""}, workerArgs...)...)
	if err != nil {
		return sp, err
	}
	ingress, u, err := cs.start(ctx, "ingress", IngressReadyLine, append([]string{"--log-level", "info", "--log-format", "json", "ingress",
		"--nats", natsURL, "--nats-token", token, "--listen", "127.0.0.1:0"}, ingressArgs...)...)
	if err != nil {
		return sp, err
	}
	return split{nats: nats, worker: worker, ingress: ingress, url: u}, nil
}

// startDev starts a `toolbus dev` child with extra args and returns its URL.
func (cs *children) startDev(ctx context.Context, name string, args ...string) (*proc.Process, string, error) {
	base := []string{"--log-level", "info", "--log-format", "json", "dev", "--listen", "127.0.0.1:0",
		"--nats-listen", "", "--data", filepath.Join(cs.dir, name+"-data")}
	return cs.start(ctx, name, devReadyLine, append(base, args...)...)
}

// startTargets starts the processes of the targets keys names and returns
// the targets, in the order of [outsideTargets].
func (cs *children) startTargets(ctx context.Context, keys []string) ([]Target, error) {
	want := map[string]bool{}
	for _, k := range keys {
		if !slicesContainsKey(k) {
			return nil, fmt.Errorf("--targets %q: want some of plain, proxy, dev, split, batch, dev-access-log, dev-bus, batch-bus", k)
		}
		want[k] = true
	}
	var targets []Target
	var plainURL, devURL string
	var plain, dev *proc.Process
	if want["plain"] || want["proxy"] {
		p, u, err := cs.start(ctx, "plain", serveReadyLine, "bench", "serve", "--kind", "plain")
		if err != nil {
			return nil, err
		}
		plainURL, plain = u, p
		if want["plain"] {
			targets = append(targets, Target{Name: TargetPlain, URL: u, CPU: cpuOf(p)})
		}
	}
	if want["proxy"] {
		p, u, err := cs.start(ctx, "proxy", serveReadyLine, "bench", "serve", "--kind", "proxy", "--to", plainURL)
		if err != nil {
			return nil, err
		}
		targets = append(targets, Target{Name: TargetProxy, URL: u, CPU: cpuOf(p, plain)})
	}
	if want["dev"] || want["batch"] {
		p, u, err := cs.startDev(ctx, "dev")
		if err != nil {
			return nil, err
		}
		devURL, dev = u, p
		if want["dev"] {
			targets = append(targets, Target{Name: TargetDev, URL: u, CPU: cpuOf(p)})
		}
	}
	if want["split"] {
		sp, err := cs.startSplit(ctx, nil, []string{"--auth", "off"})
		if err != nil {
			return nil, err
		}
		targets = append(targets, Target{Name: TargetSplit, URL: sp.url, CPU: cpuOf(sp.nats, sp.worker, sp.ingress)})
	}
	if want["batch"] {
		targets = append(targets, Target{Name: TargetBatch, URL: devURL, Body: EchoBatch(BatchCalls), CPU: cpuOf(dev)})
	}
	if want["dev-access-log"] {
		p, u, err := cs.startDev(ctx, "dev-access-log", "--access-log")
		if err != nil {
			return nil, err
		}
		targets = append(targets, Target{Name: TargetDevAccessLog, URL: u, CPU: cpuOf(p)})
	}
	if want["dev-bus"] || want["batch-bus"] {
		p, u, err := cs.startDev(ctx, "dev-bus", "--local-calls=false")
		if err != nil {
			return nil, err
		}
		if want["dev-bus"] {
			targets = append(targets, Target{Name: TargetDevBus, URL: u, CPU: cpuOf(p)})
		}
		if want["batch-bus"] {
			targets = append(targets, Target{Name: TargetBatchBus, URL: u, Body: EchoBatch(BatchCalls), CPU: cpuOf(p)})
		}
	}
	for _, t := range targets {
		if err := waitAnswers(ctx, t); err != nil {
			return nil, err
		}
	}
	return targets, nil
}

// cpuOf returns what reads the CPU time the processes ps have used so
// far, together.
func cpuOf(ps ...*proc.Process) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range ps {
			d, err := processCPU(p.Pid())
			if err != nil {
				return 0, err
			}
			sum += d
		}
		return sum, nil
	}
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
func waitAnswers(ctx context.Context, t Target) error {
	body := []byte(t.Body)
	if t.Body == "" {
		body = []byte(EchoRequest)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := Load(ctx, LoadConfig{URL: t.URL, Body: body, Duration: time.Millisecond})
		if err != nil {
			return err
		}
		if res.Requests > 0 && res.Errors == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s answered no echo within a minute: %v", t.Name, res.FirstError)
		}
		if !ctxwait.Sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// childLoad returns a [CompareConfig] Load that runs each round in a
// load generator process of its own. It is safe for concurrent use
// ([Pairs] runs two rounds at once): each round has a body file of its
// own.
func (cs *children) childLoad() func(context.Context, LoadConfig) (Result, error) {
	return func(ctx context.Context, cfg LoadConfig) (Result, error) {
		f, err := os.CreateTemp(cs.dir, "body-*.json")
		if err != nil {
			return Result{}, err
		}
		body := f.Name()
		defer os.Remove(body)
		_, err = f.Write(cfg.Body)
		if err = errors.Join(err, f.Close()); err != nil {
			return Result{}, err
		}
		command := append(cs.load[:len(cs.load):len(cs.load)], "bench", "load", "--url", cfg.URL, "--body", body,
			"--concurrency", fmt.Sprint(cfg.Concurrency), "--duration", cfg.Duration.String(), "--warmup", cfg.Warmup.String())
		// The round's own bound is its warmup, duration and the load's 5s
		// grace; a minute more covers a slow start.
		rctx, cancel := context.WithTimeout(ctx, cfg.Warmup+cfg.Duration+time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		p, err := proc.Start(rctx, proc.Spec{Name: "load generator", Command: command, Env: cs.env, Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			return Result{}, fmt.Errorf("bench: %w", err)
		}
		if err := p.Wait(); err != nil {
			return Result{}, fmt.Errorf("load generator: %w: %s", errors.Join(err, rctx.Err()), strings.TrimSpace(stderr.String()))
		}
		var res Result
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			return Result{}, fmt.Errorf("load generator's result: %w", err)
		}
		return res, nil
	}
}

// runOutside runs the echo comparison measured from outside and reports it
// on out.
func runOutside(ctx context.Context, out io.Writer, p *Progress, cfg RunConfig) (err error) {
	cs, err := newChildren(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cs.stopAll(), os.RemoveAll(cs.dir)) }()
	if cfg.Pin {
		if cs.command, cs.load, err = pinned(cs.command, cfg.ServerCPUs, cfg.LoadCPUs); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		fmt.Fprintf(out, "pinned with taskset: the targets' processes on CPUs %s, the load generators on CPUs %s\n\n", cfg.ServerCPUs, cfg.LoadCPUs)
	} else {
		fmt.Fprintf(out, "not pinned: the targets and the load generators run where the kernel puts them (--pin runs them on CPUs apart)\n\n")
	}
	targets, err := cs.startTargets(ctx, cfg.Targets)
	if err != nil {
		return err
	}
	if len(cfg.Versus) > 0 {
		return runVersus(ctx, out, p, cfg, cs, targets)
	}
	rows, err := Matrix(ctx, targets, CompareConfig{Concurrency: cfg.Concurrency, Rounds: cfg.Rounds,
		Duration: cfg.Duration, Load: cs.childLoad(), Progress: p})
	p.Stop()
	if len(rows) > 0 {
		ReportMatrix(out, rows)
	}
	return err
}

// runVersus starts the targets of the build cfg.Versus beside a, the same
// targets of the build cs starts, and measures each pair at the same time
// ([Pairs]); the load generators of both are cs's program.
func runVersus(ctx context.Context, out io.Writer, p *Progress, cfg RunConfig, cs *children, a []Target) (err error) {
	other, err := newChildren(RunConfig{Command: cfg.Versus})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, other.stopAll(), os.RemoveAll(other.dir)) }()
	if cfg.Pin {
		if other.command, _, err = pinned(other.command, cfg.ServerCPUs, cfg.LoadCPUs); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	b, err := other.startTargets(ctx, cfg.Targets)
	if err != nil {
		return err
	}
	rows, err := Pairs(ctx, a, b, CompareConfig{Concurrency: cfg.Concurrency, Rounds: cfg.Rounds,
		Duration: cfg.Duration, Load: cs.childLoad(), Progress: p})
	p.Stop()
	nameA := "this program"
	if len(cfg.Command) > 0 {
		nameA = strings.Join(cfg.Command, " ")
	}
	if len(rows) > 0 {
		ReportPairs(out, nameA, strings.Join(cfg.Versus, " "), rows)
	}
	return err
}

// ChildEnv marks the processes a bench starts. A process that has it
// refuses to start children of its own: were the program that a bench
// starts not the toolbus command (a test binary, say), it could otherwise
// start benches of its own, and they more, without end.
const ChildEnv = "TOOLBUS_BENCH_CHILD"

// newChildren prepares to start children of cfg.Command, or of this
// program.
func newChildren(cfg RunConfig) (*children, error) {
	if os.Getenv(ChildEnv) != "" {
		return nil, fmt.Errorf("bench: this process was started by a bench (%s is set) and starts no processes of its own", ChildEnv)
	}
	command := cfg.Command
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
	return &children{command: command, load: command, env: []string{ChildEnv + "=1"}, dir: dir}, nil
}

// runInFlight starts a `toolbus dev` child that admits the calls of the
// in-flight scenario, runs it, and reports it on out.
func runInFlight(ctx context.Context, out io.Writer, cfg RunConfig) (err error) {
	cs, err := newChildren(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cs.stopAll(), os.RemoveAll(cs.dir)) }()
	n := cfg.InFlightBatches * cfg.InFlightCalls
	args := []string{"--concurrency", fmt.Sprint(n + 2000), "--batch-concurrency", fmt.Sprint(cfg.InFlightCalls),
		"--max-in-flight", fmt.Sprint(n + 2000)}
	c, u, err := cs.startDev(ctx, "dev-inflight", args...)
	if err != nil {
		return err
	}
	if err := waitAnswers(ctx, Target{Name: "toolbus dev " + strings.Join(args, " "), URL: u}); err != nil {
		return err
	}
	fmt.Fprintf(out, "in flight: toolbus dev %s, pid %d\n", strings.Join(args, " "), c.Pid())
	r, err := InFlight(ctx, InFlightConfig{URL: u, Batches: cfg.InFlightBatches, Calls: cfg.InFlightCalls,
		Sleep: cfg.InFlightSleep, RSS: func() (uint64, error) { return processRSS(c.Pid()) }})
	ReportInFlight(out, r)
	return err
}
