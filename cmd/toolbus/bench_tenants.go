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
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/authfile"
	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/internal/proc"
)

type benchTenantsFlags struct {
	duration    time.Duration
	rounds      int
	concurrency int
	floodConns  int
	batch       int
	hostile     bool
	slowConns   int
	wsAnswer    int
	deployments []string
	fair        []bool
	alone       bool
	pin         bool
	serverCPUs  string
	loadCPUs    string
	binary      string
	serverArgs  []string
	progress    string
}

func newBenchTenantsCmd() *cobra.Command {
	var f benchTenantsFlags
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Measure one caller's echo latency and rate with and without another caller's flood",
		Long: `tenants measures from outside how much one caller's flood costs another's
calls. For each deployment of --deployments (dev: 'toolbus dev'; split:
'toolbus nats', 'toolbus ingress' and 'toolbus worker', three processes over
loopback TCP) and each value of --fair, it starts the deployment as child
processes with authentication on and two API keys, a victim allowed echo and a
flooder allowed echo and the rpc.jobs methods, and a load generator as a child
process of its own. The victim calls echo from --concurrency callers, one call
in flight each, in rounds that alternate without and with the flood:
batches of --flood-batch echo calls on --flood-connections connections, each the
next as soon as the last is answered (--hostile adds job submits, calls with a
new Idempotency-Key each, large answers on a WebSocket that is never read, and
connections that send 100 KB of headers slowly).

The deployment's processes run under taskset on --server-cpus and the load
generator on --load-cpus (--pin=false runs them where the kernel likes); the
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
			progress, err := progressWriter(f.progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if f.binary == "" {
				if f.binary, err = os.Executable(); err != nil {
					return fmt.Errorf("bench tenants: cannot find this program to start its server (%w): give --binary", err)
				}
			}
			return runBenchTenants(ctx, cmd.OutOrStdout(), progress, []string{f.binary}, nil, f)
		},
	}
	cmd.AddCommand(newBenchTenantsLoadCmd())
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", 3*time.Second, "length of each round")
	fl.IntVar(&f.rounds, "rounds", 2, "pairs of rounds, one without the flood and one with it (with --alone: runs against each server)")
	fl.IntVar(&f.concurrency, "concurrency", 1, "the victim's concurrent echo callers")
	fl.IntVar(&f.floodConns, "flood-connections", 4, "connections sending the flood's batches")
	fl.IntVar(&f.batch, "flood-batch", 500, "echo calls in one flood batch")
	fl.BoolVar(&f.hostile, "hostile", false, "add to the flood job submits, calls with new idempotency keys, an unread WebSocket and slow headers")
	fl.IntVar(&f.slowConns, "slow-connections", 100, "connections of the --hostile flood that send 100 KB of headers slowly")
	fl.IntVar(&f.wsAnswer, "ws-answer-bytes", 256<<10, "size of each answer the --hostile flood's unread WebSocket asks for")
	fl.StringSliceVar(&f.deployments, "deployments", []string{"dev", "split"}, "deployments measured, in turn: dev, split")
	fl.BoolSliceVar(&f.fair, "fair", []bool{true}, "the ingress's --fair, one run of each deployment per value (true,false compares the two)")
	fl.BoolVar(&f.alone, "alone", false, "measure the victim alone against each deployment with fairness on and off, alternating, instead of the flood")
	fl.BoolVar(&f.pin, "pin", true, "run the servers and the load generator on CPUs of their own with taskset")
	fl.StringVar(&f.serverCPUs, "server-cpus", "0", "CPUs the servers run on with --pin (a taskset -c list)")
	fl.StringVar(&f.loadCPUs, "load-cpus", "1", "CPUs the load generator runs on with --pin (a taskset -c list)")
	fl.StringVar(&f.binary, "binary", "", "toolbus program run as the servers and the load generator (default: this one)")
	fl.StringSliceVar(&f.serverArgs, "server-arg", nil, "extra flag of the dev or ingress command, repeatable (e.g. --server-arg=--max-in-flight=2000)")
	fl.StringVar(&f.progress, "progress", "auto", "progress line on standard error: auto (when standard error is a terminal), on or off")
	return cmd
}

// newBenchTenantsLoadCmd is the load generator `toolbus bench tenants`
// runs as a process of its own: it runs [bench.Tenants] as the file of
// --spec says and prints a [tenantsLoadResult] as JSON.
func newBenchTenantsLoadCmd() *cobra.Command {
	var specFile string
	cmd := &cobra.Command{
		Use:    "load",
		Short:  "Run the tenants scenario against a running ingress and print its result as JSON",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := os.ReadFile(specFile)
			if err != nil {
				return fmt.Errorf("bench tenants load: --spec: %w", err)
			}
			var spec tenantsLoadSpec
			if err := json.Unmarshal(b, &spec); err != nil {
				return fmt.Errorf("bench tenants load: --spec: %w", err)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			cfg := spec.Config
			if spec.RSSPid > 0 {
				cfg.RSS = func() (uint64, error) { return processRSS(spec.RSSPid) }
			}
			if spec.Progress != "" {
				cfg.Progress = bench.StartProgress(cmd.ErrOrStderr(), spec.Progress)
			}
			r, err := bench.Tenants(ctx, cfg)
			cfg.Progress.Stop()
			out := tenantsLoadResult{Result: r, Pid: os.Getpid()}
			var cerr error
			if out.CPUs, cerr = processCPUs(os.Getpid()); cerr != nil {
				out.CPUsError = cerr.Error()
			}
			return errors.Join(err, json.NewEncoder(cmd.OutOrStdout()).Encode(out))
		},
	}
	cmd.Flags().StringVar(&specFile, "spec", "", "JSON file of what to run")
	return cmd
}

// tenantsLoadSpec is what the tenants load generator runs.
type tenantsLoadSpec struct {
	Config bench.TenantsConfig
	// RSSPid is the process whose resident memory is sampled; 0 for none.
	RSSPid int
	// Progress names the progress line drawn on standard error; empty for
	// none.
	Progress string
}

// tenantsLoadResult is what the tenants load generator measured, and
// where it ran.
type tenantsLoadResult struct {
	Result bench.TenantsResult
	Pid    int
	// CPUs are those the load generator may run on, as the kernel reports
	// its affinity; CPUsError says why they are empty.
	CPUs, CPUsError string
}

// runBenchTenants starts each deployment and fairness f names in turn,
// with command (a program and its first arguments) and env added to this
// process's environment, runs the tenants scenario against it from a load
// generator child, reports it on out, and stops the deployment. It draws
// the load generator's progress on progress unless it is nil.
func runBenchTenants(ctx context.Context, out, progress io.Writer, command, env []string, f benchTenantsFlags) (err error) {
	if os.Getenv(benchChildEnv) != "" {
		return fmt.Errorf("bench tenants: this process was started by a bench (%s is set) and starts no processes of its own", benchChildEnv)
	}
	for _, d := range f.deployments {
		if d != "dev" && d != "split" {
			return fmt.Errorf("bench tenants: --deployments %q: want dev or split", d)
		}
	}
	if len(f.deployments) == 0 || len(f.fair) == 0 {
		return errors.New("bench tenants: --deployments and --fair need a value each")
	}
	tb := &tenantsBench{f: f, out: out, progress: progress, server: command, load: command,
		env: append(env[:len(env):len(env)], benchChildEnv+"=1")}
	if f.pin {
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			return fmt.Errorf("bench tenants: --pin needs taskset (%w): install it (util-linux) or give --pin=false", err)
		}
		tb.server = append([]string{taskset, "-c", f.serverCPUs}, command...)
		tb.load = append([]string{taskset, "-c", f.loadCPUs}, command...)
	}
	if tb.dir, err = os.MkdirTemp("", "toolbus-bench-tenants-"); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tb.dir)) }()
	if err := tb.writeKeys(); err != nil {
		return err
	}

	fmt.Fprintf(out, "toolbus bench tenants: load average %s at the start\n", loadAverage())
	if f.pin {
		fmt.Fprintf(out, "pinned with taskset: the servers on CPUs %s, the load generator on CPUs %s\n\n", f.serverCPUs, f.loadCPUs)
	} else {
		fmt.Fprintf(out, "not pinned (--pin=false): the servers and the load generator run where the kernel puts them\n\n")
	}
	if f.alone {
		err = tb.runAlone(ctx)
	} else {
		err = tb.runFlood(ctx)
	}
	fmt.Fprintf(out, "\nload average %s at the end\n", loadAverage())
	return err
}

// tenantsBench is one run of `toolbus bench tenants`: how it starts its
// children, and the API keys they share.
type tenantsBench struct {
	f        benchTenantsFlags
	out      io.Writer
	progress io.Writer
	// server and load start this program as a server and as the load
	// generator: under taskset when pinned.
	server, load []string
	env          []string
	dir          string

	authPath            string
	victimKey, floodKey string
}

// writeKeys writes the auth file of the servers: the victim may call
// echo, the flooder echo and the rpc.jobs methods.
func (tb *tenantsBench) writeKeys() error {
	tb.victimKey, tb.floodKey = rand.Text(), rand.Text()
	keys := authfile.File{Keys: []authfile.Key{
		{Name: "victim", SHA256: auth.HashAPIKey(tb.victimKey), Allow: []string{"echo"}},
		{Name: "flooder", SHA256: auth.HashAPIKey(tb.floodKey), Allow: []string{"echo", "rpc.jobs.*"}},
	}}
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	tb.authPath = filepath.Join(tb.dir, "auth.json")
	return os.WriteFile(tb.authPath, b, 0o600)
}

// runFlood measures every deployment at every fairness of the flags under
// the flood, one after another, and puts them side by side.
func (tb *tenantsBench) runFlood(ctx context.Context) error {
	var runs []bench.TenantsRun
	var errs []error
	for _, fair := range tb.f.fair {
		for _, d := range tb.f.deployments {
			r, err := tb.runOne(ctx, d, fair)
			errs = append(errs, err)
			if len(r.Rounds) > 0 {
				runs = append(runs, bench.TenantsRun{Deployment: d, Fair: fair, Result: r})
			}
			if ctx.Err() != nil {
				return errors.Join(errs...)
			}
		}
	}
	if len(runs) > 0 {
		fmt.Fprintf(tb.out, "\nside by side:\n")
		errs = append(errs, bench.ReportTenantsRuns(tb.out, runs))
	}
	return errors.Join(errs...)
}

// runOne starts deployment d, measures it under the flood, reports it and
// stops it.
func (tb *tenantsBench) runOne(ctx context.Context, d string, fair bool) (r bench.TenantsResult, err error) {
	t, err := tb.start(ctx, d, fair)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, t.stopAll()) }()
	fmt.Fprintf(tb.out, "== %s, --fair=%t: %s\n", d, fair, t.what)
	lr, err := tb.measure(ctx, t, tb.config(t, false), d)
	if len(lr.Result.Rounds) == 0 {
		return lr.Result, err
	}
	// A load generator that failed part way still reports its rounds.
	fmt.Fprintf(tb.out, "%s\n", placement(t.placed, lr.placed()))
	err = errors.Join(err, bench.ReportTenants(tb.out, lr.Result))
	fmt.Fprintln(tb.out)
	return lr.Result, err
}

// runAlone measures the victim alone against two servers of each
// deployment, fairness on and off, in runs that alternate between them in
// the order on, off, off, on, … so that a drift of the machine falls on
// both alike.
func (tb *tenantsBench) runAlone(ctx context.Context) error {
	var alone []bench.TenantsAlone
	var errs []error
	for _, d := range tb.f.deployments {
		a, err := tb.aloneOne(ctx, d)
		errs = append(errs, err)
		alone = append(alone, a)
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Fprintf(tb.out, "\nthe victim alone, fairness on and off (on/off: the ratio of the two):\n")
	return errors.Join(append(errs, bench.ReportTenantsAlone(tb.out, alone))...)
}

// aloneOne starts deployment d twice, fairness on and off, and measures
// the victim alone against the two in turn.
func (tb *tenantsBench) aloneOne(ctx context.Context, d string) (a bench.TenantsAlone, err error) {
	a.Deployment = d
	var ts [2]*tenantsTarget // fairness on, off
	defer func() {
		for _, t := range ts {
			if t != nil {
				err = errors.Join(err, t.stopAll())
			}
		}
	}()
	for i, fair := range []bool{true, false} {
		if ts[i], err = tb.start(ctx, d, fair); err != nil {
			return a, err
		}
		fmt.Fprintf(tb.out, "== %s, --fair=%t: %s\n", d, fair, ts[i].what)
	}
	for run := range tb.f.rounds {
		order := []int{0, 1}
		if run%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			t, fair := ts[i], i == 0
			lr, err := tb.measure(ctx, t, tb.config(t, true), fmt.Sprintf("%s alone", d))
			if err != nil {
				return a, err
			}
			a.Add(fair, lr.Result)
			q := lr.Result.Quiet
			fmt.Fprintf(tb.out, "run %d, --fair=%t: %.0f calls/s, p50 %v, p99 %v, %d failed; %s\n", run+1, fair,
				q.Throughput, q.P50.Round(time.Microsecond), q.P99.Round(time.Microsecond), q.Errors, placement(t.placed, lr.placed()))
		}
	}
	return a, nil
}

// config is the scenario the load generator runs against t.
func (tb *tenantsBench) config(t *tenantsTarget, alone bool) bench.TenantsConfig {
	f := tb.f
	rounds := f.rounds
	if alone {
		rounds = 1
	}
	return bench.TenantsConfig{
		URL: t.url, VictimKey: tb.victimKey, FloodKey: tb.floodKey,
		VictimAddr: "127.0.0.1", FloodAddr: "127.0.0.2",
		Concurrency: f.concurrency, Duration: f.duration, Rounds: rounds, Alone: alone,
		FloodConns: f.floodConns, BatchSize: f.batch,
		Hostile: f.hostile, SlowConns: f.slowConns, WSAnswerBytes: f.wsAnswer}
}

// measure runs the load generator against t with cfg and returns what it
// measured; name titles its progress line.
func (tb *tenantsBench) measure(ctx context.Context, t *tenantsTarget, cfg bench.TenantsConfig, name string) (tenantsLoadResult, error) {
	spec := tenantsLoadSpec{Config: cfg, RSSPid: t.serving.Pid()}
	if tb.progress != nil {
		spec.Progress = name
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return tenantsLoadResult{}, err
	}
	specFile, err := os.CreateTemp(tb.dir, "load-*.json")
	if err != nil {
		return tenantsLoadResult{}, err
	}
	defer os.Remove(specFile.Name())
	if _, err := specFile.Write(b); err != nil {
		return tenantsLoadResult{}, errors.Join(err, specFile.Close())
	}
	if err := specFile.Close(); err != nil {
		return tenantsLoadResult{}, err
	}
	// Each round is its settling quarter, its length and at most the
	// loop's 5 s grace; a minute more covers the wait for the first echo.
	within := time.Duration(2*max(cfg.Rounds, 1))*(cfg.Duration*5/4+5*time.Second) + 2*time.Minute
	rctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var stdout, stderr bytes.Buffer
	var errOut io.Writer = &stderr
	if tb.progress != nil {
		errOut = io.MultiWriter(tb.progress, &stderr)
	}
	p, err := proc.Start(rctx, proc.Spec{Name: "the load generator",
		Command: append(tb.load[:len(tb.load):len(tb.load)], "bench", "tenants", "load", "--spec", specFile.Name()),
		Env:     tb.env, Stdout: &stdout, Stderr: errOut})
	if err != nil {
		return tenantsLoadResult{}, fmt.Errorf("bench tenants: %w", err)
	}
	var lr tenantsLoadResult
	werr := p.Wait()
	if jerr := json.Unmarshal(stdout.Bytes(), &lr); jerr != nil && werr == nil {
		return lr, fmt.Errorf("bench tenants: the load generator's result: %w", jerr)
	}
	if werr != nil {
		return lr, fmt.Errorf("bench tenants: the load generator: %w: %s", errors.Join(werr, rctx.Err()), strings.TrimSpace(stderr.String()))
	}
	return lr, nil
}

// placed is where the load generator ran.
func (lr tenantsLoadResult) placed() cpuPlacement {
	p := cpuPlacement{name: "the load generator", pid: lr.Pid, cpus: lr.CPUs}
	if lr.CPUsError != "" {
		p.err = errors.New(lr.CPUsError)
	}
	return p
}

// tenantsTarget is a deployment under measure: its processes, the URL of
// its ingress, the process whose memory is read, and where each may run.
type tenantsTarget struct {
	*children
	url     string
	serving *proc.Process
	what    string
	placed  []cpuPlacement
}

// start starts deployment d with the ingress's --fair set to fair, and
// reads where its processes may run once they are ready.
func (tb *tenantsBench) start(ctx context.Context, d string, fair bool) (*tenantsTarget, error) {
	dir, err := os.MkdirTemp(tb.dir, fmt.Sprintf("%s-fair-%t-", d, fair))
	if err != nil {
		return nil, err
	}
	t := &tenantsTarget{children: &children{command: tb.server, env: tb.env, dir: dir}}
	ingress := append([]string{"--auth", "on", "--auth-file", tb.authPath, fmt.Sprintf("--fair=%t", fair)}, tb.f.serverArgs...)
	// What the output says of the ingress's flags: all but the file.
	shown := strings.Join(append([]string{"--auth on"}, ingress[4:]...), " ")
	var named []struct {
		name string
		p    *proc.Process
	}
	switch d {
	case "dev":
		p, u, err := t.startDev(ctx, "dev", ingress...)
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		if err := waitHTTPReady(ctx, p, strings.TrimSuffix(u, "/rpc")+"/readyz", time.Minute); err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		t.url, t.serving, t.what = u, p, "toolbus dev "+shown
		named = append(named, struct {
			name string
			p    *proc.Process
		}{"toolbus dev", p})
	case "split":
		// The split deployment of the echo bench (startTargets), with
		// authentication on.
		token := rand.Text()
		nats, natsURL, err := t.children.start(ctx, "nats", natsChildReady, "--log-level", "warn", "nats", "--nats-listen", "127.0.0.1:0",
			"--data", filepath.Join(dir, "nats-data"), "--nats-token", token)
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		worker, _, err := t.children.start(ctx, "worker", workerReadyLine, "--log-level", "info", "--log-format", "json", "worker",
			"--nats", natsURL, "--nats-token", token, "--metrics-listen", "")
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		ing, u, err := t.children.start(ctx, "ingress", ingressReadyLine, append([]string{"--log-level", "info", "--log-format", "json", "ingress",
			"--nats", natsURL, "--nats-token", token, "--listen", "127.0.0.1:0"}, ingress...)...)
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		t.url, t.serving, t.what = u, ing, "toolbus nats + toolbus worker + toolbus ingress "+shown
		named = append(named, []struct {
			name string
			p    *proc.Process
		}{{"toolbus nats", nats}, {"toolbus worker", worker}, {"toolbus ingress", ing}}...)
	}
	for _, n := range named {
		cpus, err := processCPUs(n.p.Pid())
		t.placed = append(t.placed, cpuPlacement{name: n.name, pid: n.p.Pid(), cpus: cpus, err: err})
	}
	return t, nil
}

// cpuPlacement is where a process may run: the CPUs of its affinity as
// the kernel reports it, or why they could not be read.
type cpuPlacement struct {
	name string
	pid  int
	cpus string
	err  error
}

// placement says on which CPUs each process of the server and the load
// generator may run, and whether the two are apart: a figure taken with
// both on every CPU measures the two competing for them.
func placement(server []cpuPlacement, load cpuPlacement) string {
	var parts []string
	apart := true
	all := append(server[:len(server):len(server)], load)
	for i, p := range all {
		if p.err != nil || p.cpus == "" {
			parts = append(parts, fmt.Sprintf("%s (pid %d) on CPUs unknown", p.name, p.pid))
			apart = false
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (pid %d) on CPUs %s", p.name, p.pid, p.cpus))
		// disjoint counts an unreadable list as sharing.
		if i < len(server) && !disjoint(p.cpus, load.cpus) {
			apart = false
		}
	}
	how := "the server and the load generator are pinned apart"
	if !apart {
		how = "the server and the load generator are not pinned apart: they may share CPUs"
	}
	return "CPU affinity as the kernel reports it: " + strings.Join(parts, ", ") + ": " + how
}

// loadAverage reads the load averages over 1, 5 and 15 minutes from
// /proc/loadavg (Linux only).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// devReadyLine is the line `toolbus dev` prints once it serves; its group
// is the URL.
var devReadyLine = regexp.MustCompile(`toolbus dev ready: (http://\S+/rpc)`)

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
