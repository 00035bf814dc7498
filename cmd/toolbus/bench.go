package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure toolbus against a plain net/http handler, side by side",
		Long: `bench starts, in this process, a plain net/http JSON-RPC echo handler and the
one-process toolbus cluster (ingress -> NATS -> worker -> ingress), both on
loopback ports, and loads them in alternating rounds so that both see the same
machine. It prints throughput, latency percentiles and the ratio toolbus/plain
at each concurrency, then a fan-out scenario (one batch of 100 sleep calls of
100ms) and a slow-backend scenario (a batch whose one slow call outlives its
300ms deadline), each against its target. The jobs scenario measures
rpc.jobs.get of a finished job and rpc.jobs.submit of echo jobs in a closed
loop, against their targets; the WebSocket scenario sends echo calls from many
callers over one WebSocket connection and the same over HTTP. After each
scenario that measures latencies it draws their histogram.

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
			return runBench(ctx, cmd.OutOrStdout(), progress, f)
		},
	}
	cmd.AddCommand(newBenchTenantsCmd())
	cmd.AddCommand(newBenchScaleCmd())
	cmd.Flags().DurationVar(&f.duration, "duration", 2*time.Second, "length of each measured round")
	cmd.Flags().IntVar(&f.rounds, "rounds", 3, "alternating rounds per target and concurrency")
	cmd.Flags().IntSliceVar(&f.concurrency, "concurrency", []int{1, 64}, "concurrent clients of the echo comparison")
	cmd.Flags().IntVar(&f.repeats, "repeats", 5, "batches sent by the fan-out and slow-backend scenarios")
	cmd.Flags().StringVar(&f.busTransport, "bus", "in-process", "how the cluster's parts reach the embedded NATS: in-process or tcp")
	cmd.Flags().BoolVar(&f.skipCompare, "skip-compare", false, "skip the echo comparison")
	cmd.Flags().BoolVar(&f.skipScenarios, "skip-scenarios", false, "skip the fan-out and slow-backend scenarios")
	cmd.Flags().BoolVar(&f.skipJobs, "skip-jobs", false, "skip the jobs scenario")
	cmd.Flags().BoolVar(&f.skipWS, "skip-ws", false, "skip the WebSocket scenario")
	cmd.Flags().BoolVar(&f.skipOverload, "skip-overload", false, "skip the overload scenario")
	cmd.Flags().IntVar(&f.overloadCap, "overload-capacity", 32, "sleep calls the overload scenario's cluster admits in flight; it then sends ten times as many")
	cmd.Flags().IntVar(&f.jobsConc, "jobs-concurrency", 16, "concurrent submitters of the jobs scenario")
	cmd.Flags().IntVar(&f.wsConc, "ws-concurrency", 64, "concurrent callers of the WebSocket scenario")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (load generator included) to this file")
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

	plainL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	plain := &http.Server{Handler: bench.PlainEcho(), ReadHeaderTimeout: 10 * time.Second}
	go plain.Serve(plainL)
	defer plain.Close()

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
		return err
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

	fmt.Fprintf(out, "toolbus bench: GOMAXPROCS=%d, %s/%s, %s; bus %s\n\n", runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), f.busTransport)
	var errs []error
	if !f.skipCompare {
		p := startProgress("echo")
		cs, err := bench.Compare(ctx,
			bench.Target{Name: "plain net/http", URL: "http://" + plainL.Addr().String() + "/"},
			bench.Target{Name: "toolbus", URL: toolbusURL},
			bench.CompareConfig{Concurrency: f.concurrency, Rounds: f.rounds, Duration: f.duration, Progress: p})
		p.Stop()
		if cs != nil {
			bench.ReportCompare(out, cs)
		}
		errs = append(errs, err)
	}
	if !f.skipScenarios {
		p := startProgress("fan-out")
		fo, err := bench.FanOut(ctx, bench.FanOutConfig{URL: toolbusURL, Repeats: f.repeats, Progress: p})
		p.Stop()
		fmt.Fprintln(out)
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
