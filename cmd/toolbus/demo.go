package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/node"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Start toolbus in-process, send a showcase of calls, print what happened",
		Long: `demo starts the one-process cluster on a free port, sends a fast call, a fan-out
of slow calls, a failing call and a call that outlives its 1s deadline, each
as its own request at the same moment and then all together as one batch,
and prints a table of id, method, outcome and latency. It exits 0 when every
call had the outcome it should.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dc := node.DefaultDevConfig()
			dc.Gateway.Listen = "127.0.0.1:0"
			gc, wc := dc.Gateway, dc.Worker
			var addr ingressAddr
			var st *bus.Startup
			app := newApp(
				fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
				devModules(embeddedModule(bus.EmbeddedConfig{}), gc, wc, nil),
				fx.Populate(&addr, &st),
			)
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if err := startReady(ctx, app, st); err != nil {
				return err
			}
			defer app.Stop(context.WithoutCancel(ctx))
			return clientcli.Showcase(ctx, cmd.OutOrStdout(), "http://"+addr.String()+"/rpc")
		},
	}
}
