package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
)

func newBenchScaleCmd() *cobra.Command {
	var (
		cfg      bench.ScaleRunConfig
		progress string
	)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Measure how throughput grows with the number of worker processes",
		Long: `scale starts, as child processes on loopback TCP, a NATS server ('toolbus
nats'), an ingress ('toolbus ingress') and as many workers ('toolbus worker
--concurrency') as each point needs, and loads the ingress from this process
with the demo tool sleep. For each pool size of --workers it offers each load
of --offered, a multiple of the pool's capacity (workers × --concurrency calls
at once), as that many concurrent callers, and prints calls/s, p50 and p99,
the ratio to the pool size times one worker's calls/s in the same run, how
idle the machine's CPU was meanwhile (a point on a CPU with no idle time
measures the machine, not the dispatch, and its MISS says so), and the
curve of those ratios as a chart, with PASS or MISS against 0.9 at 2×. Then it
measures how soon a worker started on a cluster with none takes its first
call, and two ingresses behind the same NATS server serving together.

With --binary given more than once, each program runs the whole scenario in
turn as the cluster's processes (the measuring one stays this program): the
curve of one build beside another's, in the same run. Every child is stopped
at the end.`,
		Example: `  toolbus bench scale
  toolbus bench scale --workers 1,16 --offered 2,1 --duration 5s
  toolbus bench scale --binary ./toolbus-before --binary ./toolbus`,
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
			return bench.RunScale(ctx, cmd.OutOrStdout(), w, cfg)
		},
	}
	fl := cmd.Flags()
	fl.IntSliceVar(&cfg.Workers, "workers", []int{1, 2, 4, 8, 16}, "worker pool sizes measured, in order; the first should be 1")
	fl.Float64SliceVar(&cfg.Offered, "offered", []float64{bench.GoalScaleOffered, 1}, "loads offered at each pool size, as multiples of its capacity")
	fl.IntVar(&cfg.Slots, "concurrency", 4, "calls of sleep one worker runs at once")
	fl.DurationVar(&cfg.Sleep, "sleep", 50*time.Millisecond, "how long each sleep call sleeps")
	fl.DurationVar(&cfg.Duration, "duration", 3*time.Second, "measured length of each point")
	fl.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured load before each point")
	fl.StringSliceVar(&cfg.Binaries, "binary", nil, "toolbus program run as the cluster's processes, repeatable (default: this one)")
	fl.BoolVar(&cfg.SkipFirstCall, "skip-first-call", false, "skip the time to a new worker's first call")
	fl.BoolVar(&cfg.SkipIngresses, "skip-ingresses", false, "skip the two ingresses")
	fl.StringVar(&progress, "progress", "auto", "progress line on standard error: auto (when standard error is a terminal), on or off")
	return cmd
}
