package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"golang.org/x/term"
)

// RunConfig is what [Run] measures: the flags of `toolbus bench`.
type RunConfig struct {
	// Duration is the length of each measured round.
	Duration time.Duration
	// Rounds are the alternating rounds per target and concurrency.
	Rounds int
	// Concurrency are the concurrent clients of the echo comparison.
	Concurrency []int
	// Repeats are the batches the fan-out and slow-backend scenarios send.
	Repeats int
	// Bus is how the in-process scenarios' cluster reaches its embedded
	// NATS: "in-process" or "tcp".
	Bus string
	// Targets are the keys of the echo comparison's targets: plain, proxy,
	// dev, split, batch, dev-access-log, dev-bus, batch-bus.
	Targets []string

	SkipCompare   bool
	SkipInFlight  bool
	SkipScenarios bool // the fan-out and slow-backend scenarios
	SkipJobs      bool
	SkipWS        bool
	SkipOverload  bool

	// OverloadCapacity is the sleep calls the overload scenario's cluster
	// admits in flight; it then sends ten times as many.
	OverloadCapacity int
	// JobsConcurrency are the concurrent submitters of the jobs scenario.
	JobsConcurrency int
	// WSConcurrency are the concurrent callers of the WebSocket scenario.
	WSConcurrency int
	// InFlightBatches are the batches the in-flight scenario sends at once,
	// InFlightCalls the sleep calls in each, and InFlightSleep how long
	// each sleeps.
	InFlightBatches int
	InFlightCalls   int
	InFlightSleep   time.Duration
	// CPUProfile, when not empty, is the file a CPU profile of this
	// process during the in-process scenarios is written to.
	CPUProfile string

	// Command starts the toolbus program, as the targets and the load
	// generators of the echo comparison and the in-flight scenario; empty
	// means this program (os.Executable).
	Command []string
	// Versus, when not empty, starts a second build (its program and
	// arguments): the echo comparison then runs each of its targets of
	// both builds at the same time, round by round, and reports the
	// second build's figures over the first's ([Pairs]).
	Versus []string
	// Pin runs the echo comparison's targets on ServerCPUs and its load
	// generators on LoadCPUs (taskset -c lists) with taskset.
	Pin        bool
	ServerCPUs string
	LoadCPUs   string
	// Cluster starts the cluster of the in-process scenarios. Required
	// unless all of them are skipped.
	Cluster StartCluster
}

// ClusterSpec is the cluster an in-process scenario asks of [StartCluster]:
// an embedded NATS server, an ingress and a worker serving the demo tools,
// at the defaults of `toolbus dev` but what it names.
type ClusterSpec struct {
	// TCP makes the cluster reach its embedded NATS over loopback TCP
	// rather than in the process.
	TCP bool
	// MaxInFlight, when positive, is the aggregator's bound on calls in
	// flight.
	MaxInFlight int
	// Concurrency, when positive, is the calls the worker runs at once.
	Concurrency int
	// SleepCap, when positive, is the sleep calls the aggregator admits
	// in flight.
	SleepCap int
}

// StartCluster starts an in-process cluster as spec says and returns once
// it takes calls, with its ingress's host:port and a function that stops
// it. The command provides it because it owns the assembly of a process,
// so that the scenarios measure the parts `toolbus dev` runs.
type StartCluster func(ctx context.Context, spec ClusterSpec) (addr string, stop func(), err error)

// ProgressWriter returns where the progress line of --progress mode goes:
// stderr, or nil for none. Auto draws it only when stderr is a terminal, so
// that CI logs and pipes get no carriage returns.
func ProgressWriter(mode string, stderr io.Writer) (io.Writer, error) {
	switch mode {
	case "on":
		return stderr, nil
	case "off":
		return nil, nil
	case "auto":
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return stderr, nil
		}
		return nil, nil
	}
	return nil, fmt.Errorf("--progress %q: want auto, on or off", mode)
}

// progressStarter starts the progress line of a scenario; it returns nil,
// which shows nothing, when there is nowhere to draw it.
type progressStarter func(name string) *Progress

func newProgressStarter(w io.Writer) progressStarter {
	return func(name string) *Progress {
		if w == nil {
			return nil
		}
		return StartProgress(w, name)
	}
}

// Run runs the scenarios cfg selects and reports them on out, drawing
// their progress on progress unless it is nil. Each progress line is
// cleared before its scenario's report is printed.
func Run(ctx context.Context, out, progress io.Writer, cfg RunConfig) error {
	startProgress := newProgressStarter(progress)
	var tcp bool
	switch cfg.Bus {
	case "in-process":
	case "tcp":
		tcp = true
	default:
		return fmt.Errorf("--bus %q: want in-process or tcp", cfg.Bus)
	}

	fmt.Fprintf(out, "toolbus bench: GOMAXPROCS=%d, %s/%s, %s\n\n", runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	var errs []error
	if !cfg.SkipCompare {
		p := startProgress("echo")
		errs = append(errs, runOutside(ctx, out, p, cfg))
		p.Stop()
	}
	if !cfg.SkipInFlight {
		fmt.Fprintln(out)
		errs = append(errs, runInFlight(ctx, out, cfg))
	}
	if cfg.SkipScenarios && cfg.SkipJobs && cfg.SkipWS && cfg.SkipOverload {
		return errors.Join(errs...)
	}

	addr, stop, err := cfg.Cluster(ctx, ClusterSpec{TCP: tcp, MaxInFlight: 100000, Concurrency: 4096})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer stop()
	toolbusURL := "http://" + addr + "/rpc"
	wsURL := "ws://" + addr + "/rpc"

	if cfg.CPUProfile != "" {
		pf, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	fmt.Fprintf(out, "\nin-process scenarios: the load generator and the cluster (bus %s) share this process\n\n", cfg.Bus)
	if !cfg.SkipScenarios {
		p := startProgress("fan-out")
		fo, err := FanOut(ctx, FanOutConfig{URL: toolbusURL, Repeats: cfg.Repeats, Progress: p})
		p.Stop()
		ReportFanOut(out, fo)
		errs = append(errs, err)
		p = startProgress("slow backend")
		sl, err := SlowBackend(ctx, SlowConfig{URL: toolbusURL, Repeats: cfg.Repeats, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		ReportSlow(out, sl)
		errs = append(errs, err)
	}
	if !cfg.SkipJobs {
		p := startProgress("jobs")
		jr, err := Jobs(ctx, JobsConfig{URL: toolbusURL, Concurrency: cfg.JobsConcurrency, Duration: cfg.Duration, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		ReportJobs(out, jr)
		errs = append(errs, err)
	}
	if !cfg.SkipWS {
		p := startProgress("websocket")
		wr, err := WebSocket(ctx, WebSocketConfig{HTTPURL: toolbusURL, WSURL: wsURL,
			Concurrency: cfg.WSConcurrency, Rounds: cfg.Rounds, Duration: cfg.Duration, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		ReportWebSocket(out, wr)
		errs = append(errs, err)
	}
	if !cfg.SkipOverload {
		fmt.Fprintln(out)
		errs = append(errs, runOverload(ctx, out, startProgress, cfg, tcp))
	}
	return errors.Join(errs...)
}

// runOverload measures admission control on a cluster of its own whose
// aggregator admits only cfg.OverloadCapacity sleep calls at once.
func runOverload(ctx context.Context, out io.Writer, startProgress progressStarter, cfg RunConfig, tcp bool) error {
	if cfg.OverloadCapacity <= 0 {
		return fmt.Errorf("--overload-capacity must be positive, got %d", cfg.OverloadCapacity)
	}
	addr, stop, err := cfg.Cluster(ctx, ClusterSpec{TCP: tcp, SleepCap: cfg.OverloadCapacity})
	if err != nil {
		return err
	}
	defer stop()
	p := startProgress("overload")
	r, err := Overload(ctx, OverloadConfig{URL: "http://" + addr + "/rpc", Capacity: cfg.OverloadCapacity, Duration: cfg.Duration, Progress: p})
	p.Stop()
	ReportOverload(out, r)
	return err
}
