package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/internal/tracelog"
)

// envOverrides names the environment variable of flags whose name alone
// would give a less clear one.
var envOverrides = map[string]string{
	"nats": "TOOLBUS_NATS_URL",
	"url":  "TOOLBUS_URL",
}

// envName returns the environment variable twin of a flag that means the
// same in every command: --max-body-bytes is TOOLBUS_MAX_BODY_BYTES.
func envName(flag string) string {
	if n, ok := envOverrides[flag]; ok {
		return n
	}
	return "TOOLBUS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// envScopes are the commands whose flags mean something of their own, so
// that one environment does not set two meanings: every flag of `toolbus
// bench` and its modes is TOOLBUS_BENCH_…, of `toolbus health`
// TOOLBUS_HEALTH_…, of `toolbus a2a send` TOOLBUS_A2A_SEND_…, and the
// deadline of `toolbus call` TOOLBUS_CALL_TIMEOUT. A nil flag set scopes
// every flag of the command.
var envScopes = []struct {
	path   string
	prefix string
	flags  map[string]bool
}{
	{"toolbus bench", "TOOLBUS_BENCH_", nil},
	{"toolbus health", "TOOLBUS_HEALTH_", nil},
	{"toolbus a2a send", "TOOLBUS_A2A_SEND_", nil},
	{"toolbus call", "TOOLBUS_CALL_", map[string]bool{"timeout": true}},
}

// flagEnv returns the environment variable of flag f of cmd, and the name
// it had before commands got variables of their own, when that differs
// (still read, with a warning). A flag every command inherits keeps its
// one name.
func flagEnv(cmd *cobra.Command, f *pflag.Flag) (name, old string) {
	plain := envName(f.Name)
	if cmd.InheritedFlags().Lookup(f.Name) != nil && cmd.Root().PersistentFlags().Lookup(f.Name) != nil {
		return plain, ""
	}
	path := cmd.CommandPath()
	for _, s := range envScopes {
		if (path == s.path || strings.HasPrefix(path, s.path+" ")) && (s.flags == nil || s.flags[f.Name]) {
			return s.prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")), plain
		}
	}
	return plain, ""
}

type globalFlags struct {
	logLevel  string
	logFormat string
}

func newRootCmd() *cobra.Command {
	var g globalFlags
	root := &cobra.Command{
		Use:   "toolbus",
		Short: "JSON-RPC 2.0 tool calls fanned out over NATS",
		Long: `toolbus accepts JSON-RPC 2.0 batches over HTTP, publishes every call to a
NATS subject named by its method, lets workers in queue groups run the tools,
and gathers the answers by id, each call under its own deadline.

Every flag can also be set by an environment variable, named in its help.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			logger, err := newLogger(g.logLevel, g.logFormat)
			if err != nil {
				return err
			}
			slog.SetDefault(logger)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "json", "log format: json or text")
	root.AddCommand(newDevCmd(), newDemoCmd(), newIngressCmd(), newWorkerCmd(), newBenchCmd())
	root.AddCommand(clientcli.Commands()...)
	root.AddCommand(newStatusCmd(), newConformCmd())
	root.AddCommand(newNatsCmd(), newNatsCredentialsCmd())
	annotateEnv(root)
	return root
}

// annotateEnv appends each flag's environment variable to its help text.
func annotateEnv(cmd *cobra.Command) {
	mark := func(f *pflag.Flag) {
		name, _ := flagEnv(cmd, f)
		suffix := " [$" + name + "]"
		if !strings.HasSuffix(f.Usage, suffix) {
			f.Usage += suffix
		}
	}
	cmd.PersistentFlags().VisitAll(mark)
	cmd.Flags().VisitAll(mark)
	for _, c := range cmd.Commands() {
		annotateEnv(c)
	}
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set. A scoped flag's former name is
// still read when the new one is not set, with a warning on stderr.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		name, old := flagEnv(cmd, f)
		v, ok := os.LookupEnv(name)
		if !ok && old != "" {
			if v, ok = os.LookupEnv(old); ok {
				fmt.Fprintf(cmd.ErrOrStderr(), "toolbus: %s sets --%s of %s for now; name it %s, as %s may mean something else to other commands\n",
					old, f.Name, cmd.CommandPath(), name, old)
				name = old
			}
		}
		if ok {
			if e := cmd.Flags().Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	// Every line written with a traced context carries its trace_id.
	switch format {
	case "json":
		return slog.New(tracelog.Handler(slog.NewJSONHandler(os.Stderr, opts))), nil
	case "text":
		return slog.New(tracelog.Handler(slog.NewTextHandler(os.Stderr, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}
