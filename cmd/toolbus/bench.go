package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/node"
)

func newBenchCmd() *cobra.Command {
	var (
		cfg              bench.RunConfig
		binary, progress string
	)
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
echo batches against 'toolbus dev' (--versus runs a second build's beside them at once); --targets picks them, dev-access-log
adds 'toolbus dev --access-log', and dev-bus and batch-bus the same two
against 'toolbus dev --local-calls=false', every call over the embedded NATS. It prints throughput, latency percentiles and
the ratios at each concurrency, with PASS or MISS against each goal. The
in-flight scenario sends ten batches of 1000 sleep calls of 3s at once to a
'toolbus dev' child and reads its resident memory meanwhile; 'bench
inflight-split' sends them through one ingress of a split deployment.

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
			w, err := bench.ProgressWriter(progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if binary != "" {
				cfg.Command = []string{binary}
			}
			cfg.Cluster = startBenchCluster
			return bench.Run(ctx, cmd.OutOrStdout(), w, cfg)
		},
	}
	cmd.AddCommand(newBenchTenantsCmd(), newBenchScaleCmd(), newBenchInFlightSplitCmd(), newBenchLoadCmd(), newBenchServeCmd())
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 2*time.Second, "length of each measured round")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", 3, "alternating rounds per target and concurrency")
	cmd.Flags().IntSliceVar(&cfg.Concurrency, "concurrency", []int{1, 64}, "concurrent clients of the echo comparison")
	cmd.Flags().IntVar(&cfg.Repeats, "repeats", 5, "batches sent by the fan-out and slow-backend scenarios")
	cmd.Flags().StringVar(&cfg.Bus, "bus", "in-process", "how the in-process scenarios' cluster reaches its embedded NATS: in-process or tcp")
	cmd.Flags().StringSliceVar(&cfg.Targets, "targets", []string{"plain", "proxy", "dev", "split", "batch"}, "targets of the echo comparison: plain, proxy, dev, split, batch, dev-access-log, dev-bus, batch-bus")
	cmd.Flags().BoolVar(&cfg.Pin, "pin", false, "run the echo comparison's targets and its load generators on CPUs apart with taskset")
	cmd.Flags().StringVar(&cfg.ServerCPUs, "server-cpus", "0", "CPUs the echo comparison's targets run on with --pin (a taskset -c list)")
	cmd.Flags().StringVar(&cfg.LoadCPUs, "load-cpus", "1", "CPUs the echo comparison's load generators run on with --pin (a taskset -c list)")
	cmd.Flags().StringVar(&binary, "binary", "", "toolbus program run as the targets and load generators (default: this one)")
	cmd.Flags().StringSliceVar(&cfg.Versus, "versus", nil, "a second toolbus program whose targets the echo comparison runs at the same time as the first's, reporting its CPU per request and rate over the first's")
	cmd.Flags().BoolVar(&cfg.SkipInFlight, "skip-inflight", false, "skip the in-flight scenario")
	cmd.Flags().IntVar(&cfg.InFlightBatches, "inflight-batches", bench.DefaultInFlightBatches, "batches the in-flight scenario sends at once")
	cmd.Flags().IntVar(&cfg.InFlightCalls, "inflight-calls", bench.DefaultInFlightCalls, "sleep calls in each batch of the in-flight scenario")
	cmd.Flags().DurationVar(&cfg.InFlightSleep, "inflight-sleep", bench.DefaultInFlightSleep, "how long each call of the in-flight scenario sleeps")
	cmd.Flags().BoolVar(&cfg.SkipCompare, "skip-compare", false, "skip the echo comparison")
	cmd.Flags().BoolVar(&cfg.SkipScenarios, "skip-scenarios", false, "skip the fan-out and slow-backend scenarios")
	cmd.Flags().BoolVar(&cfg.SkipJobs, "skip-jobs", false, "skip the jobs scenario")
	cmd.Flags().BoolVar(&cfg.SkipWS, "skip-ws", false, "skip the WebSocket scenario")
	cmd.Flags().BoolVar(&cfg.SkipOverload, "skip-overload", false, "skip the overload scenario")
	cmd.Flags().IntVar(&cfg.OverloadCapacity, "overload-capacity", 32, "sleep calls the overload scenario's cluster admits in flight; it then sends ten times as many")
	cmd.Flags().IntVar(&cfg.JobsConcurrency, "jobs-concurrency", 16, "concurrent submitters of the jobs scenario")
	cmd.Flags().IntVar(&cfg.WSConcurrency, "ws-concurrency", 64, "concurrent callers of the WebSocket scenario")
	cmd.Flags().StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of this process during the in-process scenarios to this file")
	cmd.Flags().StringVar(&progress, "progress", "auto", "progress line on standard error while a scenario runs: auto (when standard error is a terminal), on or off")
	return cmd
}

// startBenchCluster is the [bench.StartCluster] of the in-process
// scenarios: the parts of `toolbus dev` assembled as the dev command
// assembles them, at its flags' defaults but what spec names.
func startBenchCluster(ctx context.Context, spec bench.ClusterSpec) (string, func(), error) {
	natsModule := embeddedModule(bus.EmbeddedConfig{})
	if spec.TCP {
		natsModule = embeddedTCPModule()
	}
	dc := node.DefaultDevConfig()
	dc.Gateway.Listen = "127.0.0.1:0"
	gc, wc := dc.Gateway, dc.Worker
	if spec.MaxInFlight > 0 {
		gc.MaxInFlight = spec.MaxInFlight
	}
	if spec.SleepCap > 0 {
		gc.MethodMaxInFlight = []string{fmt.Sprintf("sleep=%d", spec.SleepCap)}
	}
	if spec.Concurrency > 0 {
		wc.Concurrency = spec.Concurrency
	}
	var addr ingressAddr
	var st *bus.Startup
	app := newApp(
		fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
		devModules(natsModule, gc, wc, nil),
		fx.Populate(&addr, &st),
	)
	if err := startReady(ctx, app, st); err != nil {
		return "", nil, err
	}
	return addr.String(), func() { _ = app.Stop(context.WithoutCancel(ctx)) }, nil
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
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return bench.LoadChild(ctx, cmd.OutOrStdout(), cfg, bodyFile)
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
			return bench.ServeChild(cmd.OutOrStdout(), kind, to)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "plain", "plain or proxy")
	cmd.Flags().StringVar(&to, "to", "", "the proxy's backend URL")
	return cmd
}
