package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/conform"
	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/node"
)

// conformFlags are the flags of `toolbus conform`.
type conformFlags struct {
	remote       bus.RemoteConfig
	prefix       string
	only         []string
	startTimeout time.Duration
	drainTimeout time.Duration
}

func newConformCmd() *cobra.Command {
	f := conformFlags{remote: bus.DefaultRemoteConfig()}
	cmd := &cobra.Command{
		Use:   "conform [flags] -- command [args...]",
		Short: "Check that a worker, in any language, speaks the bus protocol",
		Long: `conform starts the worker command given after --, waits until it answers,
and drives it through each rule of schema/PROTOCOL.md as the aggregator's side
of the bus: envelopes and ids, batches, notifications, error codes and crashes,
unreadable messages, late calls and deadlines, cancel, acks and heartbeats,
busy refusals, orphaned calls, progress reports and announcements; last it
sends the worker SIGTERM while it holds a call and checks that it drains and
leaves. It prints one PASS, FAIL or SKIP line per rule and a summary, and
exits with status 1 when a rule fails.

The worker must serve the conformance toolset (conform.echo, conform.sleep,
conform.serial, conform.fail, conform.panic, conform.progress) that
schema/PROTOCOL.md describes. It starts with TOOLBUS_NATS_URL, TOOLBUS_PREFIX
and the credentials given here (TOOLBUS_NATS_TOKEN, TOOLBUS_NATS_USER,
TOOLBUS_NATS_PASSWORD, TOOLBUS_NATS_CREDS, TOOLBUS_NATS_NKEY) in its
environment. Use a NATS server that no other worker of the toolset joins.`,
		Example: `  toolbus conform --nats nats://127.0.0.1:4222 -- python3 my_worker.py
  toolbus conform --nats-token "$TOKEN" -- toolbus worker --tools conform --jobs=false
  toolbus conform --only cancel,liveness -- ./my-worker`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return errors.New("conform: give the command that starts the worker after --, as in: toolbus conform -- python3 my_worker.py")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(clientcli.CommandContext(cmd), cmd, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.prefix, "prefix", bus.DefaultPrefix, "NATS subject prefix of the cluster the worker serves")
	fl.StringSliceVar(&f.only, "only", nil, "run only these rules (keys as printed, comma-separated); the worker still starts and stops")
	fl.DurationVar(&f.startTimeout, "start-timeout", conform.DefaultStartTimeout, "how long to wait for the worker's first answer")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", conform.DefaultDrainTimeout, "how long to wait for the worker to exit after SIGTERM")
	node.Bind(fl, &f.remote, node.RemoteFlags)
	// The worker joins the same servers: its help says so.
	fl.Lookup("nats").Usage = "NATS server URL(s), comma-separated, that the worker joins too"
	return cmd
}

func (f *conformFlags) run(ctx context.Context, cmd *cobra.Command, argv []string) error {
	if f.startTimeout <= 0 || f.drainTimeout <= 0 {
		return errors.New("conform: --start-timeout and --drain-timeout must be positive durations, such as 30s")
	}
	opts, err := f.remote.Options()
	if err != nil {
		return fmt.Errorf("conform: %w", err)
	}
	opts = append([]bus.Option{bus.WithName("toolbus-conform"), bus.WithLogger(discard)},
		append(opts, bus.WithNATSOptions(nats.Timeout(bus.DefaultConnectTimeout)))...)
	nc, err := bus.Connect(f.remote.URL, opts...)
	if err != nil {
		return fmt.Errorf("conform: NATS not reachable at %s: %w (start one with `toolbus nats`, or give --nats and its credentials)", bus.RedactURL(f.remote.URL), err)
	}
	defer nc.Close()
	// SIGINT stops the check, and with it the worker.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := conform.Run(ctx, conform.Config{
		Conn:         nc,
		Prefix:       f.prefix,
		Command:      argv,
		Env:          f.env(),
		Out:          cmd.OutOrStdout(),
		WorkerOutput: cmd.ErrOrStderr(),
		Only:         f.only,
		StartTimeout: f.startTimeout,
		DrainTimeout: f.drainTimeout,
	})
	if err != nil {
		return err
	}
	if rep.Failed() {
		return clientcli.ErrReported
	}
	return nil
}

// env passes the kit's credentials on to the worker in the variables
// `toolbus worker` reads, so that a worker may take them from there.
func (f *conformFlags) env() []string { return f.remote.Env(envName) }
