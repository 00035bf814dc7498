package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/internal/proc"
)

type benchTenantsFlags struct {
	duration    time.Duration
	rounds      int
	concurrency int
	floodConns  int
	batch       int
	slowConns   int
	wsAnswer    int
	binary      string
	serverArgs  []string
	progress    string
}

func newBenchTenantsCmd() *cobra.Command {
	var f benchTenantsFlags
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Measure one caller's echo latency with and without another caller's flood",
		Long: `tenants starts 'toolbus dev --auth on' as a child process with two API keys,
a victim allowed echo and a flooder allowed echo and the rpc.jobs methods, and
measures from outside it. The victim calls echo from --concurrency callers in
rounds that alternate without and with the flood: 1000-call batches on several
connections, job submits, calls with a new Idempotency-Key each, large answers
on a WebSocket that is never read, and connections that send 100 KB of headers
slowly. It prints the victim's p99 in both, their ratio against the goal (at
most 2×), the victim's failed calls by code and reason, the flood's answers by
class, and the child's resident memory (VmRSS) in both. The child runs at the
shipped defaults unless --server-arg gives it other flags; it is stopped at the
end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			progress, err := progressWriter(f.progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.binary == "" {
				if f.binary, err = os.Executable(); err != nil {
					return fmt.Errorf("bench tenants: cannot find this program to start its server (%w): give --binary", err)
				}
			}
			return runBenchTenants(ctx, cmd.OutOrStdout(), newProgressStarter(progress), []string{f.binary}, nil, f)
		},
	}
	cmd.Flags().DurationVar(&f.duration, "duration", 3*time.Second, "length of each round")
	cmd.Flags().IntVar(&f.rounds, "rounds", 2, "pairs of rounds, one without the flood and one with it")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 4, "the victim's concurrent echo callers")
	cmd.Flags().IntVar(&f.floodConns, "flood-connections", 4, "connections sending the flood's batches")
	cmd.Flags().IntVar(&f.batch, "flood-batch", 1000, "echo calls in one flood batch")
	cmd.Flags().IntVar(&f.slowConns, "slow-connections", 100, "flood connections that send 100 KB of headers slowly")
	cmd.Flags().IntVar(&f.wsAnswer, "ws-answer-bytes", 256<<10, "size of each answer the flood's unread WebSocket asks for")
	cmd.Flags().StringVar(&f.binary, "binary", "", "toolbus program run as the server (default: this one)")
	cmd.Flags().StringSliceVar(&f.serverArgs, "server-arg", nil, "extra flag of the server's dev command, repeatable (e.g. --server-arg=--max-in-flight=2000)")
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "progress line on standard error: auto (when standard error is a terminal), on or off")
	return cmd
}

// runBenchTenants starts the server with command (a program and its first
// arguments) and env added to this process's environment, runs the
// tenants scenario against it, reports it on out, and stops the server.
func runBenchTenants(ctx context.Context, out io.Writer, startProgress progressStarter, command, env []string, f benchTenantsFlags) error {
	dir, err := os.MkdirTemp("", "toolbus-bench-tenants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	victimKey, floodKey := rand.Text(), rand.Text()
	keys := authFile{}
	for _, k := range []struct {
		name, key string
		allow     []string
	}{{"victim", victimKey, []string{"echo"}}, {"flooder", floodKey, []string{"echo", "rpc.jobs.*"}}} {
		keys.Keys = append(keys.Keys, struct {
			Name     string   `json:"name"`
			SHA256   string   `json:"sha256"`
			Allow    []string `json:"allow"`
			Operator bool     `json:"operator"`
		}{Name: k.name, SHA256: auth.HashAPIKey(k.key), Allow: k.allow})
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	authPath := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authPath, b, 0o600); err != nil {
		return err
	}
	args := append([]string{"--log-level", "error", "dev", "--auth", "on", "--auth-file", authPath,
		"--listen", "127.0.0.1:0", "--nats-listen", "", "--data", filepath.Join(dir, "data")}, f.serverArgs...)
	srv, err := startDevServer(ctx, command, args, env)
	if err != nil {
		return err
	}
	defer srv.stop()

	fmt.Fprintf(out, "toolbus bench tenants: server pid %d at %s (toolbus dev --auth on %s)\n", srv.Pid(), srv.url, strings.Join(f.serverArgs, " "))
	fmt.Fprintf(out, "%s\n\n", placement(srv.Pid(), os.Getpid()))
	p := startProgress("tenants")
	r, err := bench.Tenants(ctx, bench.TenantsConfig{
		URL: srv.url, VictimKey: victimKey, FloodKey: floodKey,
		VictimAddr: "127.0.0.1", FloodAddr: "127.0.0.2",
		Concurrency: f.concurrency, Duration: f.duration, Rounds: f.rounds,
		FloodConns: f.floodConns, BatchSize: f.batch, SlowConns: f.slowConns, WSAnswerBytes: f.wsAnswer,
		RSS: func() (uint64, error) { return processRSS(srv.Pid()) }, Progress: p})
	p.Stop()
	if len(r.Rounds) > 0 {
		bench.ReportTenants(out, r)
	}
	return errors.Join(err, srv.stop())
}

var devReadyLine = regexp.MustCompile(`toolbus dev ready: (http://\S+/rpc)`)

// devServer is a toolbus dev child process and the URL it serves.
type devServer struct {
	*proc.Process
	url string
}

// startDevServer starts command with args and waits until it prints its
// URL and answers /readyz, at most a minute each.
func startDevServer(ctx context.Context, command, args, env []string) (*devServer, error) {
	p, err := proc.Start(ctx, proc.Spec{Name: "the server", Command: append(command[:len(command):len(command)], args...),
		Env: env, Ready: devReadyLine, ReadyWithin: time.Minute, StopWithin: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("bench tenants: %w", err)
	}
	s := &devServer{Process: p, url: p.Ready()[1]}
	if err := waitHTTPReady(ctx, p, strings.TrimSuffix(s.url, "/rpc")+"/readyz", time.Minute); err != nil {
		return nil, errors.Join(err, s.stop())
	}
	return s, nil
}

// stop stops the server and returns why it ended if not at this request.
func (s *devServer) stop() error {
	if err := s.Stop(); err != nil {
		return fmt.Errorf("bench tenants: %w", err)
	}
	return nil
}

// placement says on which CPUs the server (pid server) and the load
// generators (this process, pid self) may run, as the kernel reports their
// affinity, and whether they are apart: a figure taken with both on every
// CPU measures the two competing for them.
func placement(server, self int) string {
	s, err1 := processCPUs(server)
	g, err2 := processCPUs(self)
	if err := errors.Join(err1, err2); err != nil {
		return "CPU placement unknown: " + err.Error()
	}
	how := "pinned apart"
	if !disjoint(s, g) {
		how = "not pinned apart: they share CPUs (run the server under taskset -c 0 with --binary, and the bench under taskset -c 1)"
	}
	return fmt.Sprintf("the server runs on CPUs %s and the load generators on CPUs %s: %s", s, g, how)
}

// processCPUs reads the CPUs process pid may run on, as a list such as
// "0-1" or "0,2", from /proc/<pid>/status (Linux only).
func processCPUs(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", fmt.Errorf("read the CPUs of process %d: %w (only Linux has /proc)", pid, err)
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("Cpus_allowed_list:")); ok {
			return strings.TrimSpace(string(rest)), nil
		}
	}
	return "", fmt.Errorf("read the CPUs of process %d: /proc status has no Cpus_allowed_list line", pid)
}

// disjoint reports whether the CPU lists a and b ("0-3,6") name no CPU
// in common; a list it cannot read counts as sharing.
func disjoint(a, b string) bool {
	set := func(l string) map[int]bool {
		m := map[int]bool{}
		for part := range strings.SplitSeq(l, ",") {
			lo, hi, isRange := strings.Cut(part, "-")
			from, err1 := strconv.Atoi(lo)
			to := from
			var err2 error
			if isRange {
				to, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || to < from || to-from > 4096 {
				return nil
			}
			for c := from; c <= to; c++ {
				m[c] = true
			}
		}
		return m
	}
	x, y := set(a), set(b)
	if x == nil || y == nil {
		return false
	}
	for c := range x {
		if y[c] {
			return false
		}
	}
	return true
}

// processRSS reads the resident memory of process pid from
// /proc/<pid>/status (Linux only).
func processRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's memory: %w (only Linux has /proc)", err)
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read the server's memory: VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("read the server's memory: /proc status has no VmRSS line")
}
