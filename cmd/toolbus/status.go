package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/node"
)

func newStatusCmd() *cobra.Command {
	var cfg clientcli.StatusConfig
	remote := bus.DefaultRemoteConfig()
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the NATS servers, the ingresses and workers of a cluster, and their methods",
		Long: `status connects to NATS and prints the server it reached (its id, version,
cluster peers, round-trip time and whether JetStream is on), then the ingresses
and workers that answer on the bus under --prefix (found as the micro services
toolbus-ingress and toolbus-worker, as ` + "`nats micro ls`" + ` lists them), then their
methods over the last minute: one row per method merged over the workers, and
one per method and ingress.

Percentiles do not merge exactly: a merged P50 is the mean of the workers'
medians weighted by their calls, a merged P99 the largest of their P99s.`,
		Example: `  toolbus status
  toolbus status --nats nats://nats-0:4222,nats://nats-1:4222 --wait 3s
  toolbus status --json | jq '.instances[] | select(.kind == "worker")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := remote.Options()
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			cfg.NATS, cfg.Options = remote.URL, opts
			return clientcli.Status(clientcli.CommandContext(cmd), cmd.OutOrStdout(), cfg)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Prefix, "prefix", bus.DefaultPrefix, "NATS subject prefix of the cluster")
	fl.DurationVar(&cfg.Wait, "wait", time.Second, "how long to listen for ingresses and workers")
	fl.DurationVar(&cfg.ConnectTimeout, "connect-timeout", bus.DefaultConnectTimeout, "how long to wait for each NATS server to accept the connection, and for its round trip")
	fl.BoolVar(&cfg.JSON, "json", false, "print the gathered data as JSON instead of tables")
	node.Bind(fl, &remote, node.RemoteFlags)
	return cmd
}
