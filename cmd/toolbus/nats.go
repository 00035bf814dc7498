package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/bus/natsd"
)

func newNatsCmd() *cobra.Command {
	cfg := natsd.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run a NATS server with JetStream for an ingress and workers to join",
		Long: `nats runs a NATS server with JetStream in the foreground until SIGINT or
SIGTERM, for an ingress and workers started as processes of their own. Once
JetStream is ready it prints the lines that join them.

The bus is never open by accident. Without --config, it has two users with
the least privilege of deploy/nats/cluster-secure.conf: "ingress", which
publishes calls and keeps the jobs, and "worker", which takes calls and
answers only those it received. Their passwords are generated at the first
start and kept in the --data directory (ingress.password and
worker.password, mode 0600), so that a restart keeps them and the parts
reconnect; each part reads its own with --nats-user and --nats-password-file.
The permissions are those of the subject prefix "toolbus".

--nats-token or --token-file give instead one token that can do everything:
any client holding it can publish calls as any caller, answer any call and
read every job record. Choose it on purpose, for your own processes alone.

--config reads a nats-server configuration file for cluster routes,
accounts, users, permissions and TLS; the flags --nats-listen, --data,
--monitor-listen and --max-payload, when given, override the file, and
otherwise fill in what it leaves out. A file with no authorization of its own
needs --nats-token or --token-file, or --no-auth to run an open bus on purpose.
JetStream is always on.`,
		Example: `  toolbus nats
  toolbus nats --data /var/lib/toolbus-nats
  toolbus nats --token-file toolbus-nats.token
  toolbus nats --config deploy/nats/cluster-secure.conf --data /data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return natsd.Run(ctx, natsConfig(cmd.Flags().Changed, cfg), cmd.OutOrStdout(), slog.Default())
		},
	}
	bindNatsFlags(cmd.Flags(), &cfg)
	return cmd
}

// bindNatsFlags binds the flags of `toolbus nats` into cfg, with cfg's
// values as their defaults.
func bindNatsFlags(fl *pflag.FlagSet, cfg *natsd.Config) {
	fl.StringVar(&cfg.Listen, "nats-listen", cfg.Listen, "host:port NATS clients connect to (port 0 picks a free port)")
	fl.StringVar(&cfg.Data, "data", cfg.Data, "directory of the JetStream store and of the users' password files, kept across restarts; by default in the user's state directory, never in a working tree where git would pick the passwords up")
	fl.StringVar(&cfg.File, "config", cfg.File, "nats-server configuration file: cluster routes, accounts, users, permissions, TLS")
	fl.StringVar(&cfg.Token, "nats-token", cfg.Token, "one all-powerful token instead of the users ingress and worker: a client with it can act as any caller and any worker and read every job record")
	fl.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, "file holding one all-powerful token instead of the users ingress and worker; made with a generated token (mode 0600) when missing, and never printed")
	fl.StringVar(&cfg.Monitor, "monitor-listen", cfg.Monitor, "host:port of the HTTP monitoring endpoints /healthz, /varz, /jsz (port 0 picks a free port; empty for none)")
	fl.Int32Var(&cfg.MaxPayload, "max-payload", cfg.MaxPayload, "largest message in bytes, the same as toolbus dev's")
	fl.BoolVar(&cfg.NoAuth, "no-auth", cfg.NoAuth, "run an open bus: anyone who reaches it can act as any caller and any worker")
}

// natsConfig is cfg with the flags given (on the command line or by their
// variables) overriding the configuration file.
func natsConfig(given func(flag string) bool, cfg natsd.Config) natsd.Config {
	cfg.Overrides = natsd.Overrides{
		Listen:     given("nats-listen"),
		Monitor:    given("monitor-listen"),
		Data:       given("data"),
		MaxPayload: given("max-payload"),
	}
	return cfg
}

const (
	// allPowerful and devTokenUse end the ready lines of `toolbus dev`
	// (serve.go), which shares the sentence on its token with `toolbus
	// nats`.
	allPowerful = natsd.AllPowerful
	devTokenUse = "so give it only to your own workers on this machine; for anything shared, run toolbus nats, ingress and worker separately, each part as its own NATS user"
)

// shellQuote quotes the words of `toolbus dev`'s join line as `toolbus
// nats` quotes its own.
func shellQuote(s string) string { return natsd.ShellQuote(s) }
