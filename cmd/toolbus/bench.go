package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"
	"golang.org/x/term"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/bench"
)

type benchFlags struct {
	duration      time.Duration
	rounds        int
	concurrency   []int
	repeats       int
	busTransport  string
	skipCompare   bool
	skipScenarios bool
	skipJobs      bool
	skipWS        bool
	skipOverload  bool
	overloadCap   int
	jobsConc      int
	wsConc        int
	cpuProfile    string
	progress      string
	targets       []string
	binary        string
	skipInFlight  bool

	inflightBatches int
	inflightCalls   int
	inflightSleep   time.Duration

	// command starts this program as a child (default: os.Executable, or
	// --binary); tests set it to the test binary.
	command []string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure toolbus against a plain net/http handler, side by side",
		Long: `bench measures toolbus from outside: every target runs as a process of its
own, started from this program (or --binary) on free loopback ports, and each
round's load comes from a load generator process of its own. The echo
comparison loads, in alternating rounds (a, b, c, d, a, b, c, d, …) so that
all see the same machine: a plain net/http JSON-RPC echo handler, a plain
net/http/httputil reverse proxy to it (one gateway hop), 'toolbus dev' (one
process, embedded NATS; it runs the demo tools' calls in the process while
they have a free slot), the split deployment ('toolbus nats', 'toolbus
ingress' and 'toolbus worker', three processes over loopback TCP), and 10-call
echo batches against 'toolbus dev'; --targets picks them, dev-access-log
adds 'toolbus dev --access-log', and dev-bus and batch-bus the same two
against 'toolbus dev --local-calls=false', every call over the embedded NATS. It prints throughput, latency percentiles and
the ratios at each concurrency, with PASS or MISS against each goal. The
in-flight scenario sends ten batches of 1000 sleep calls of 3s at once to a
'toolbus dev' child and reads its resident memory meanwhile.

The other scenarios run in this process against an in-process cluster (their
output says so): a fan-out scenario (one batch of 100 sleep calls of 100ms)
and a slow-backend scenario (a batch whose one slow call outlives its 300ms
deadline), the jobs scenario (rpc.jobs.get of a finished job and
rpc.jobs.submit of echo jobs in a closed loop), the WebSocket scenario (echo
calls from many callers over one WebSocket connection and the same over
HTTP) and the overload scenario. After each scenario that measures latencies
it draws their histogram. Children are stopped when the bench ends.

While a scenario runs, a progress line on standard error shows how far it has
got, when standard error is a terminal (--progress auto).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			progress, err := progressWriter(f.progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.binary != "" {
				f.command = []string{f.binary}
			}
			return runBench(ctx, cmd.OutOrStdout(), progress, f)
		},
	}
	cmd.AddCommand(newBenchTenantsCmd(), newBenchScaleCmd(), newBenchLoadCmd(), newBenchServeCmd())
	cmd.Flags().DurationVar(&f.duration, "duration", 2*time.Second, "length of each measured round")
	cmd.Flags().IntVar(&f.rounds, "rounds", 3, "alternating rounds per target and concurrency")
	cmd.Flags().IntSliceVar(&f.concurrency, "concurrency", []int{1, 64}, "concurrent clients of the echo comparison")
	cmd.Flags().IntVar(&f.repeats, "repeats", 5, "batches sent by the fan-out and slow-backend scenarios")
	cmd.Flags().StringVar(&f.busTransport, "bus", "in-process", "how the in-process scenarios' cluster reaches its embedded NATS: in-process or tcp")
	cmd.Flags().StringSliceVar(&f.targets, "targets", []string{"plain", "proxy", "dev", "split", "batch"}, "targets of the echo comparison: plain, proxy, dev, split, batch, dev-access-log, dev-bus, batch-bus")
	cmd.Flags().StringVar(&f.binary, "binary", "", "toolbus program run as the targets and load generators (default: this one)")
	cmd.Flags().BoolVar(&f.skipInFlight, "skip-inflight", false, "skip the in-flight scenario")
	cmd.Flags().IntVar(&f.inflightBatches, "inflight-batches", 10, "batches the in-flight scenario sends at once")
	cmd.Flags().IntVar(&f.inflightCalls, "inflight-calls", 1000, "sleep calls in each batch of the in-flight scenario")
	cmd.Flags().DurationVar(&f.inflightSleep, "inflight-sleep", 3*time.Second, "how long each call of the in-flight scenario sleeps")
	cmd.Flags().BoolVar(&f.skipCompare, "skip-compare", false, "skip the echo comparison")
	cmd.Flags().BoolVar(&f.skipScenarios, "skip-scenarios", false, "skip the fan-out and slow-backend scenarios")
	cmd.Flags().BoolVar(&f.skipJobs, "skip-jobs", false, "skip the jobs scenario")
	cmd.Flags().BoolVar(&f.skipWS, "skip-ws", false, "skip the WebSocket scenario")
	cmd.Flags().BoolVar(&f.skipOverload, "skip-overload", false, "skip the overload scenario")
	cmd.Flags().IntVar(&f.overloadCap, "overload-capacity", 32, "sleep calls the overload scenario's cluster admits in flight; it then sends ten times as many")
	cmd.Flags().IntVar(&f.jobsConc, "jobs-concurrency", 16, "concurrent submitters of the jobs scenario")
	cmd.Flags().IntVar(&f.wsConc, "ws-concurrency", 64, "concurrent callers of the WebSocket scenario")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the in-process scenarios to this file")
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "progress line on standard error while a scenario runs: auto (when standard error is a terminal), on or off")
	return cmd
}

// progressWriter returns where the progress line of --progress mode goes:
// stderr, or nil for none. Auto draws it only when stderr is a terminal, so
// that CI logs and pipes get no carriage returns.
func progressWriter(mode string, stderr io.Writer) (io.Writer, error) {
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
type progressStarter func(name string) *bench.Progress

func newProgressStarter(w io.Writer) progressStarter {
	return func(name string) *bench.Progress {
		if w == nil {
			return nil
		}
		return bench.StartProgress(w, name)
	}
}

// runBench runs the scenarios f selects and reports them on out, drawing
// their progress on progress unless it is nil. Each progress line is
// cleared before its scenario's report is printed.
func runBench(ctx context.Context, out, progress io.Writer, f benchFlags) error {
	startProgress := newProgressStarter(progress)
	var natsModule fx.Option
	switch f.busTransport {
	case "in-process":
		natsModule = embeddedModule(bus.EmbeddedConfig{})
	case "tcp":
		natsModule = embeddedTCPModule()
	default:
		return fmt.Errorf("--bus %q: want in-process or tcp", f.busTransport)
	}

	fmt.Fprintf(out, "toolbus bench: GOMAXPROCS=%d, %s/%s, %s\n\n", runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	var errs []error
	if !f.skipCompare {
		p := startProgress("echo")
		errs = append(errs, runOutside(ctx, out, p, f))
		p.Stop()
	}
	if !f.skipInFlight {
		fmt.Fprintln(out)
		errs = append(errs, runInFlight(ctx, out, f))
	}
	if f.skipScenarios && f.skipJobs && f.skipWS && f.skipOverload {
		return errors.Join(errs...)
	}

	ic := defaultIngressConfig()
	ic.maxInFlight = 100000
	wc := defaultWorkerConfig()
	wc.concurrency = 4096
	var addr ingressAddr
	var st *bus.Startup
	app := newApp(
		fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
		natsModule,
		workerModule(wc),
		ingressModule(ic),
		fx.Populate(&addr, &st),
	)
	if err := startReady(ctx, app, st); err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer app.Stop(context.WithoutCancel(ctx))
	toolbusURL := "http://" + addr.String() + "/rpc"
	wsURL := "ws://" + addr.String() + "/rpc"

	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	fmt.Fprintf(out, "\nin-process scenarios: the load generator and the cluster (bus %s) share this process\n\n", f.busTransport)
	if !f.skipScenarios {
		p := startProgress("fan-out")
		fo, err := bench.FanOut(ctx, bench.FanOutConfig{URL: toolbusURL, Repeats: f.repeats, Progress: p})
		p.Stop()
		bench.ReportFanOut(out, fo)
		errs = append(errs, err)
		p = startProgress("slow backend")
		sl, err := bench.SlowBackend(ctx, bench.SlowConfig{URL: toolbusURL, Repeats: f.repeats, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		bench.ReportSlow(out, sl)
		errs = append(errs, err)
	}
	if !f.skipJobs {
		p := startProgress("jobs")
		jr, err := bench.Jobs(ctx, bench.JobsConfig{URL: toolbusURL, Concurrency: f.jobsConc, Duration: f.duration, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		bench.ReportJobs(out, jr)
		errs = append(errs, err)
	}
	if !f.skipWS {
		p := startProgress("websocket")
		wr, err := bench.WebSocket(ctx, bench.WebSocketConfig{HTTPURL: toolbusURL, WSURL: wsURL,
			Concurrency: f.wsConc, Rounds: f.rounds, Duration: f.duration, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
		bench.ReportWebSocket(out, wr)
		errs = append(errs, err)
	}
	if !f.skipOverload {
		fmt.Fprintln(out)
		errs = append(errs, runOverload(ctx, out, startProgress, f, natsModule))
	}
	return errors.Join(errs...)
}

// runOverload measures admission control on a cluster of its own whose
// aggregator admits only --overload-capacity sleep calls at once.
func runOverload(ctx context.Context, out io.Writer, startProgress progressStarter, f benchFlags, natsModule fx.Option) error {
	if f.overloadCap <= 0 {
		return fmt.Errorf("--overload-capacity must be positive, got %d", f.overloadCap)
	}
	ic := defaultIngressConfig()
	ic.sec.methodCaps = []string{fmt.Sprintf("sleep=%d", f.overloadCap)}
	wc := defaultWorkerConfig()
	var addr ingressAddr
	var st *bus.Startup
	app := newApp(
		fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
		natsModule,
		workerModule(wc),
		ingressModule(ic),
		fx.Populate(&addr, &st),
	)
	if err := startReady(ctx, app, st); err != nil {
		return err
	}
	defer app.Stop(context.WithoutCancel(ctx))
	p := startProgress("overload")
	r, err := bench.Overload(ctx, bench.OverloadConfig{URL: "http://" + addr.String() + "/rpc", Capacity: f.overloadCap, Duration: f.duration, Progress: p})
	p.Stop()
	bench.ReportOverload(out, r)
	return err
}
