package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/conform"
	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/node"
)

func newConformCmd() *cobra.Command {
	remote := bus.DefaultRemoteConfig()
	cfg := conform.Config{Prefix: bus.DefaultPrefix, StartTimeout: conform.DefaultStartTimeout, DrainTimeout: conform.DefaultDrainTimeout}
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
			// SIGINT stops the check, and with it the worker.
			ctx, stop := signal.NotifyContext(clientcli.CommandContext(cmd), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Command, cfg.Out, cfg.WorkerOutput = args, cmd.OutOrStdout(), cmd.ErrOrStderr()
			rep, err := conform.RunRemote(ctx, remote, envName, cfg)
			if err != nil {
				return err
			}
			if rep.Failed() {
				return clientcli.ErrReported
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "NATS subject prefix of the cluster the worker serves")
	fl.StringSliceVar(&cfg.Only, "only", nil, "run only these rules (keys as printed, comma-separated); the worker still starts and stops")
	fl.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "how long to wait for the worker's first answer")
	fl.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long to wait for the worker to exit after SIGTERM")
	node.Bind(fl, &remote, node.RemoteFlags)
	// The worker joins the same servers: its help says so.
	fl.Lookup("nats").Usage = "NATS server URL(s), comma-separated, that the worker joins too"
	return cmd
}
