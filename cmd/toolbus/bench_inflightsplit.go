package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
)

func newBenchInFlightSplitCmd() *cobra.Command {
	var cfg bench.InFlightSplitRunConfig
	cmd := &cobra.Command{
		Use:   "inflight-split",
		Short: "Measure the memory of 10,000 slow calls in flight through one ingress of a split deployment",
		Long: `inflight-split sends the in-flight scenario (ten batches of 1000 sleep calls
of 3s at once, each batch on a connection of its own, every id checked for
its result) through one ingress of a split deployment: it starts, as child
processes on 127.0.0.1, a NATS server with a token ('toolbus nats'), one
worker ('toolbus worker --concurrency', twice the calls) and one ingress
('toolbus ingress --auth off --max-in-flight', the calls and 2000 more,
'--batch-concurrency', the calls of a batch), and sends the calls once an
echo call is answered. Until the last answer it reads the resident memory
(VmRSS) of the ingress, the worker and the NATS server every 10ms, and
prints the ingress's before and at most, its growth in all and per call,
the time to the last answer, the worker's and the server's memory beside
it, and PASS or MISS against the two goals: the ingress grows by at most
4 KB a call (40 MB for 10,000), and every call is answered within 0.5s
after the sleep.

Each round starts a new deployment of each program of --binary in turn, so
that with --binary given twice and --rounds N two builds are compared in
alternating rounds on the same machine; a table puts the rounds side by
side at the end. Every child is stopped at the end of its round.`,
		Example: `  toolbus bench inflight-split
  toolbus bench inflight-split --binary ./toolbus-before --binary ./toolbus --rounds 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return bench.RunInFlightSplit(ctx, cmd.OutOrStdout(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&cfg.Binaries, "binary", nil, "toolbus program run as the deployment's processes, repeatable: each runs once a round, in turn (default: this one)")
	fl.IntVar(&cfg.Rounds, "rounds", 1, "rounds, each with a new deployment of every --binary")
	fl.IntVar(&cfg.Batches, "batches", bench.DefaultInFlightBatches, "batches sent at once")
	fl.IntVar(&cfg.Calls, "calls", bench.DefaultInFlightCalls, "sleep calls in each batch")
	fl.DurationVar(&cfg.Sleep, "sleep", bench.DefaultInFlightSleep, "how long each call sleeps")
	return cmd
}
