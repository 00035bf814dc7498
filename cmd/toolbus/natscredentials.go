package main

import (
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus/natsd"
)

func newNatsCredentialsCmd() *cobra.Command {
	cfg := natsd.DefaultCredentialsConfig()
	cmd := &cobra.Command{
		Use:   "nats-credentials",
		Short: "Generate the NATS passwords (and the ingresses' MCP state key) of the secured deployment",
		Long: `nats-credentials generates a random password for each NATS user of
deploy/nats/cluster-secure.conf (ingress and worker, or --users) and writes
them for the compose file or for Kubernetes:

  --format env  TOOLBUS_<USER>_NATS_PASSWORD=... lines: the compose file reads
                them as deploy/.env
  --format k8s  a Secret toolbus-nats-<user> per user, the password under the
                key "password": the manifests in deploy/k8s and the NATS
                chart's values refer to them

With them it generates the key the ingress replicas share to sign MCP request
states (--mcp-state-key): TOOLBUS_MCP_STATE_KEY in the environment file, or
the Secret toolbus-mcp-state under the key "key".

It writes to standard output, or to --out, made readable by this user alone;
an existing --out is kept unless --force, since the running cluster knows its
passwords.`,
		Example: `  toolbus nats-credentials --out deploy/.env
  toolbus nats-credentials --format k8s --out toolbus-nats-secrets.yaml
  toolbus nats-credentials --users ingress,worker,worker-math --out deploy/.env
  docker run --rm "toolbus:$TOOLBUS_IMAGE_TAG" nats-credentials > deploy/.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return natsd.WriteCredentials(cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Format, "format", cfg.Format, "env (an environment file for docker compose) or k8s (Kubernetes Secrets)")
	fl.StringVar(&cfg.Out, "out", cfg.Out, "file to write, mode 0600 (default: standard output)")
	fl.BoolVar(&cfg.Force, "force", cfg.Force, "replace an existing --out, and with it the passwords the cluster knows")
	fl.StringSliceVar(&cfg.Users, "users", cfg.Users, "NATS users to make a password for")
	return cmd
}
