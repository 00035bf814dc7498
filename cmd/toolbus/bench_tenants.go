package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
)

func newBenchTenantsCmd() *cobra.Command {
	var (
		cfg              bench.TenantsRunConfig
		binary, progress string
	)
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Measure one caller's echo latency and rate with and without another caller's flood",
		Long: `tenants measures from outside how much one caller's flood costs another's
calls. For each deployment of --deployments (dev: 'toolbus dev'; split:
'toolbus nats', 'toolbus ingress' and 'toolbus worker', three processes over
loopback TCP) and each value of --fair, it starts the deployment as child
processes with authentication on and two API keys, a victim allowed echo and a
flooder allowed echo and the rpc.jobs methods, and two load generators, the
victim's and the flood's, each a child process of its own. The victim calls
echo from --concurrency callers, one call in flight each, in rounds that
alternate without and with the flood:
batches of --flood-batch echo calls on --flood-connections connections, each the
next as soon as the last is answered (--hostile adds job submits, calls with a
new Idempotency-Key each, large answers on a WebSocket that is never read, and
connections that send 100 KB of headers slowly).

The deployment's processes run under taskset on --server-cpus and the load
generators on --load-cpus (--pin=false runs them where the kernel likes); the
output says on which CPUs each may run, as the kernel reports its affinity.
Each run prints the victim's figures round by round, PASS or MISS against
each goal (p99 under the flood at most 3× without it, at least 40% of the
call rate kept, no failed call), its failed calls by code and reason, the
flood's answers by class and the serving process's resident memory; a table
at the end puts the runs side by side. The load average is printed at the
start and the end.

--alone measures instead the victim calling alone against two servers of
each deployment, one with --fair and one with --fair=false, in runs that
alternate between them, and prints the ratio of their figures: the cost of
the fair scheduler when there is nothing to share.

The servers run at the shipped defaults unless --server-arg gives them other
flags; everything is stopped at the end.`,
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
			return bench.RunTenants(ctx, cmd.OutOrStdout(), w, cfg)
		},
	}
	cmd.AddCommand(newBenchTenantsLoadCmd())
	fl := cmd.Flags()
	fl.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of each round")
	fl.IntVar(&cfg.Rounds, "rounds", 2, "pairs of rounds, one without the flood and one with it (with --alone: runs against each server)")
	fl.IntVar(&cfg.Concurrency, "concurrency", 1, "the victim's concurrent echo callers")
	fl.IntVar(&cfg.FloodConns, "flood-connections", 4, "connections sending the flood's batches")
	fl.IntVar(&cfg.Batch, "flood-batch", 500, "echo calls in one flood batch")
	fl.IntVar(&cfg.FloodNice, "flood-nice", 0, "run the flood's load generator under nice -n this, so that on the CPUs it shares with the victim's it does not delay the victim's calls (19: the victim measures the server alone)")
	fl.BoolVar(&cfg.Hostile, "hostile", false, "add to the flood job submits, calls with new idempotency keys, an unread WebSocket and slow headers")
	fl.IntVar(&cfg.SlowConns, "slow-connections", 100, "connections of the --hostile flood that send 100 KB of headers slowly")
	fl.IntVar(&cfg.WSAnswer, "ws-answer-bytes", 256<<10, "size of each answer the --hostile flood's unread WebSocket asks for")
	fl.StringSliceVar(&cfg.Deployments, "deployments", []string{"dev", "split"}, "deployments measured, in turn: dev, split")
	fl.BoolSliceVar(&cfg.Fair, "fair", []bool{true}, "the ingress's --fair, one run of each deployment per value (true,false compares the two)")
	fl.BoolVar(&cfg.Alone, "alone", false, "measure the victim alone against each deployment with fairness on and off, alternating, instead of the flood")
	fl.BoolVar(&cfg.Pin, "pin", true, "run the servers and the load generators on CPUs of their own with taskset")
	fl.StringVar(&cfg.ServerCPUs, "server-cpus", "0", "CPUs the servers run on with --pin (a taskset -c list)")
	fl.StringVar(&cfg.LoadCPUs, "load-cpus", "1", "CPUs the load generators run on with --pin (a taskset -c list)")
	fl.StringVar(&binary, "binary", "", "toolbus program run as the servers and the load generators (default: this one)")
	fl.StringSliceVar(&cfg.ServerArgs, "server-arg", nil, "extra flag of the dev or ingress command, repeatable (e.g. --server-arg=--max-in-flight=2000)")
	fl.StringVar(&progress, "progress", "auto", "progress line on standard error: auto (when standard error is a terminal), on or off")
	return cmd
}

// newBenchTenantsLoadCmd is the load generator `toolbus bench tenants`
// runs as a process of its own ([bench.TenantsLoadChild]).
func newBenchTenantsLoadCmd() *cobra.Command {
	var specFile string
	cmd := &cobra.Command{
		Use:    "load",
		Short:  "Run the tenants scenario against a running ingress and print its result as JSON",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return bench.TenantsLoadChild(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), specFile)
		},
	}
	cmd.Flags().StringVar(&specFile, "spec", "", "JSON file of what to run")
	return cmd
}
