package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestEnvName(t *testing.T) {
	tests := []struct {
		name string
		flag string
		want string
	}{
		{name: "dashes become underscores", flag: "max-body-bytes", want: "TOOLBUS_MAX_BODY_BYTES"},
		{name: "one word", flag: "prefix", want: "TOOLBUS_PREFIX"},
		{name: "nats is a URL", flag: "nats", want: "TOOLBUS_NATS_URL"},
		{name: "url", flag: "url", want: "TOOLBUS_URL"},
		{name: "nats-listen keeps its own name", flag: "nats-listen", want: "TOOLBUS_NATS_LISTEN"},
		{name: "persistent flag", flag: "log-level", want: "TOOLBUS_LOG_LEVEL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envName(tt.flag); got != tt.want {
				t.Errorf("envName(%q) = %q, want %q", tt.flag, got, tt.want)
			}
		})
	}
}

// subcommand returns the command at path under a fresh root, with args
// parsed as the command line would be (persistent flags merged in).
func subcommand(t *testing.T, args []string, path ...string) *cobra.Command {
	t.Helper()
	cmd, _, err := newRootCmd().Find(path)
	if err != nil {
		t.Fatalf("Find(%q): %v", path, err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("ParseFlags(%q): %v", args, err)
	}
	return cmd
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		path    []string
		env     map[string]string
		args    []string
		flag    string
		want    string
		wantErr string // a part of the error message; "" for none
	}{
		{name: "variable sets the flag", path: []string{"call"}, env: map[string]string{"TOOLBUS_CALL_TIMEOUT": "300ms"},
			flag: "timeout", want: "300ms"},
		{name: "the former name is still read", path: []string{"call"}, env: map[string]string{"TOOLBUS_TIMEOUT": "300ms"},
			flag: "timeout", want: "300ms"},
		{name: "the scoped name wins over the former", path: []string{"call"}, env: map[string]string{"TOOLBUS_TIMEOUT": "300ms", "TOOLBUS_CALL_TIMEOUT": "1s"},
			flag: "timeout", want: "1s"},
		{name: "a worker's concurrency is not a bench's", path: []string{"bench"}, env: map[string]string{"TOOLBUS_BENCH_CONCURRENCY": "8,16", "TOOLBUS_CONCURRENCY": "7"},
			flag: "concurrency", want: "[8,16]"},
		{name: "bench's log level is everyone's", path: []string{"bench"}, env: map[string]string{"TOOLBUS_LOG_LEVEL": "warn"},
			flag: "log-level", want: "warn"},
		{name: "command line wins", path: []string{"call"}, env: map[string]string{"TOOLBUS_CALL_TIMEOUT": "300ms"},
			args: []string{"--timeout", "2s"}, flag: "timeout", want: "2s"},
		{name: "unset variable keeps the default", path: []string{"call"},
			flag: "url", want: "http://127.0.0.1:8080/rpc"},
		{name: "url twin", path: []string{"call"}, env: map[string]string{"TOOLBUS_URL": "http://10.0.0.1:9/rpc"},
			flag: "url", want: "http://10.0.0.1:9/rpc"},
		{name: "nats twin", path: []string{"worker"}, env: map[string]string{"TOOLBUS_NATS_URL": "nats://a:4222,nats://b:4222"},
			flag: "nats", want: "nats://a:4222,nats://b:4222"},
		{name: "dashed name", path: []string{"ingress"}, env: map[string]string{"TOOLBUS_MAX_BODY_BYTES": "1024"},
			flag: "max-body-bytes", want: "1024"},
		{name: "persistent flag of the root", path: []string{"worker"}, env: map[string]string{"TOOLBUS_LOG_LEVEL": "debug"},
			flag: "log-level", want: "debug"},
		{name: "list flag", path: []string{"worker"}, env: map[string]string{"TOOLBUS_TOOLS": "demo,demo"},
			flag: "tools", want: "[demo,demo]"},
		{name: "bad duration names the variable", path: []string{"call"}, env: map[string]string{"TOOLBUS_CALL_TIMEOUT": "soon"},
			flag: "timeout", wantErr: "TOOLBUS_CALL_TIMEOUT"},
		{name: "bad integer names the variable", path: []string{"ingress"}, env: map[string]string{"TOOLBUS_MAX_BODY_BYTES": "lots"},
			flag: "max-body-bytes", wantErr: "TOOLBUS_MAX_BODY_BYTES"},
		{name: "bad value ignored when the flag is given", path: []string{"call"}, env: map[string]string{"TOOLBUS_CALL_TIMEOUT": "soon"},
			args: []string{"--timeout=1s"}, flag: "timeout", want: "1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cmd := subcommand(t, tt.args, tt.path...)
			err := applyEnv(cmd)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("applyEnv(%s) = %v, want an error naming %s", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("applyEnv(%s) = %v, want nil", tt.path, err)
			}
			if got := cmd.Flags().Lookup(tt.flag).Value.String(); got != tt.want {
				t.Errorf("--%s = %q, want %q", tt.flag, got, tt.want)
			}
		})
	}
}

// TestEnvBadValueFailsCommand checks that the command line reports a bad
// variable before doing anything.
func TestEnvBadValueFailsCommand(t *testing.T) {
	t.Setenv("TOOLBUS_CALL_TIMEOUT", "soon")
	out, err := execute(t, context.Background(), "call", "echo")
	if err == nil || !strings.Contains(err.Error(), "TOOLBUS_CALL_TIMEOUT") {
		t.Fatalf("call with TOOLBUS_CALL_TIMEOUT=soon = %v (output %q), want an error naming TOOLBUS_CALL_TIMEOUT", err, out)
	}
}

func TestEveryFlagNamesItsVariable(t *testing.T) {
	seen := 0
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			seen++
			name, _ := flagEnv(cmd, f)
			want := "[$" + name + "]"
			if !strings.HasSuffix(f.Usage, want) {
				t.Errorf("%s --%s help = %q, want it to end in %s", cmd.CommandPath(), f.Name, f.Usage, want)
			}
			if strings.Count(f.Usage, "[$") != 1 {
				t.Errorf("%s --%s help = %q, want the variable named once", cmd.CommandPath(), f.Name, f.Usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRootCmd())
	if seen < 20 {
		t.Errorf("checked %d flags, want every flag of every command (20 or more)", seen)
	}
}

func TestHelpListsVariables(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "worker", args: []string{"help", "worker"}, want: []string{"[$TOOLBUS_NATS_URL]", "[$TOOLBUS_TOOLS]", "[$TOOLBUS_LOG_LEVEL]"}},
		{name: "dev", args: []string{"help", "dev"}, want: []string{"[$TOOLBUS_NATS_LISTEN]", "[$TOOLBUS_MAX_BODY_BYTES]", "[$TOOLBUS_DATA]"}},
		{name: "call", args: []string{"call", "--help"}, want: []string{"[$TOOLBUS_URL]", "[$TOOLBUS_CALL_TIMEOUT]"}},
		{name: "bench", args: []string{"bench", "--help"}, want: []string{"[$TOOLBUS_BENCH_CONCURRENCY]", "[$TOOLBUS_BENCH_DURATION]", "[$TOOLBUS_LOG_LEVEL]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execute(t, context.Background(), tt.args...)
			if err != nil {
				t.Fatalf("toolbus %s = %v, want nil", strings.Join(tt.args, " "), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("toolbus %s printed:\n%s\nwant it to contain %s", strings.Join(tt.args, " "), out, w)
				}
			}
		})
	}
}
