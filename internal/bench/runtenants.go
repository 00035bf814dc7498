package bench

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

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/authfile"
	"github.com/toolbus/toolbus/internal/proc"
)

// TenantsRunConfig is what [RunTenants] measures: the flags of `toolbus
// bench tenants`.
type TenantsRunConfig struct {
	// Duration is the length of each round.
	Duration time.Duration
	// Rounds are the pairs of rounds, one without the flood and one with
	// it (with Alone: the runs against each server).
	Rounds int
	// Concurrency are the victim's concurrent echo callers.
	Concurrency int
	// FloodConns are the connections sending the flood's batches, Batch
	// the echo calls in one flood batch.
	FloodConns int
	Batch      int
	// Hostile adds to the flood job submits, calls with new idempotency
	// keys, an unread WebSocket (answers of WSAnswer bytes) and
	// SlowConns connections that send their headers slowly.
	Hostile   bool
	SlowConns int
	WSAnswer  int
	// Deployments are those measured, in turn: dev, split.
	Deployments []string
	// Fair are the values of the ingress's --fair, one run of each
	// deployment per value.
	Fair []bool
	// Alone measures the victim alone against each deployment with
	// fairness on and off, alternating, instead of the flood.
	Alone bool
	// Pin runs the servers on ServerCPUs and the load generator on
	// LoadCPUs (taskset -c lists) with taskset.
	Pin        bool
	ServerCPUs string
	LoadCPUs   string
	// ServerArgs are extra flags of the dev or ingress command.
	ServerArgs []string

	// Command starts the toolbus program (a program and its first
	// arguments) as the servers and the load generator; empty means this
	// program (os.Executable).
	Command []string
	// Env is added to this process's environment for the children.
	Env []string
}

// TenantsLoadChild is the load generator [RunTenants] starts as a process
// of its own (the hidden `toolbus bench tenants load`): it runs [Tenants]
// as the JSON file specFile says, draws its progress on stderr when the
// file asks for it, and prints what it measured on stdout as JSON.
func TenantsLoadChild(ctx context.Context, stdout, stderr io.Writer, specFile string) error {
	b, err := os.ReadFile(specFile)
	if err != nil {
		return fmt.Errorf("bench tenants load: --spec: %w", err)
	}
	var spec tenantsLoadSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("bench tenants load: --spec: %w", err)
	}
	cfg := spec.Config
	if spec.RSSPid > 0 {
		cfg.RSS = func() (uint64, error) { return processRSS(spec.RSSPid) }
	}
	if spec.Progress != "" {
		cfg.Progress = StartProgress(stderr, spec.Progress)
	}
	r, err := Tenants(ctx, cfg)
	cfg.Progress.Stop()
	out := tenantsLoadResult{Result: r, Pid: os.Getpid()}
	var cerr error
	if out.CPUs, cerr = ProcessCPUs(os.Getpid()); cerr != nil {
		out.CPUsError = cerr.Error()
	}
	return errors.Join(err, json.NewEncoder(stdout).Encode(out))
}

// tenantsLoadSpec is what the tenants load generator runs.
type tenantsLoadSpec struct {
	Config TenantsConfig
	// RSSPid is the process whose resident memory is sampled; 0 for none.
	RSSPid int
	// Progress names the progress line drawn on standard error; empty for
	// none.
	Progress string
}

// tenantsLoadResult is what the tenants load generator measured, and
// where it ran.
type tenantsLoadResult struct {
	Result TenantsResult
	Pid    int
	// CPUs are those the load generator may run on, as the kernel reports
	// its affinity; CPUsError says why they are empty.
	CPUs, CPUsError string
}

// RunTenants starts each deployment and fairness cfg names in turn, runs
// the tenants scenario against it from a load generator child, reports
// it on out, and stops the deployment. It draws the load generator's
// progress on progress unless it is nil.
func RunTenants(ctx context.Context, out, progress io.Writer, cfg TenantsRunConfig) (err error) {
	if os.Getenv(ChildEnv) != "" {
		return fmt.Errorf("bench tenants: this process was started by a bench (%s is set) and starts no processes of its own", ChildEnv)
	}
	command := cfg.Command
	if len(command) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench tenants: cannot find this program to start its server (%w): give --binary", err)
		}
		command = []string{self}
	}
	for _, d := range cfg.Deployments {
		if d != "dev" && d != "split" {
			return fmt.Errorf("bench tenants: --deployments %q: want dev or split", d)
		}
	}
	if len(cfg.Deployments) == 0 || len(cfg.Fair) == 0 {
		return errors.New("bench tenants: --deployments and --fair need a value each")
	}
	tb := &tenantsBench{cfg: cfg, out: out, progress: progress, server: command, load: command,
		env: append(cfg.Env[:len(cfg.Env):len(cfg.Env)], ChildEnv+"=1")}
	if cfg.Pin {
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			return fmt.Errorf("bench tenants: --pin needs taskset (%w): install it (util-linux) or give --pin=false", err)
		}
		tb.server = append([]string{taskset, "-c", cfg.ServerCPUs}, command...)
		tb.load = append([]string{taskset, "-c", cfg.LoadCPUs}, command...)
	}
	if tb.dir, err = os.MkdirTemp("", "toolbus-bench-tenants-"); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tb.dir)) }()
	if err := tb.writeKeys(); err != nil {
		return err
	}

	fmt.Fprintf(out, "toolbus bench tenants: load average %s at the start\n", loadAverage())
	if cfg.Pin {
		fmt.Fprintf(out, "pinned with taskset: the servers on CPUs %s, the load generator on CPUs %s\n\n", cfg.ServerCPUs, cfg.LoadCPUs)
	} else {
		fmt.Fprintf(out, "not pinned (--pin=false): the servers and the load generator run where the kernel puts them\n\n")
	}
	if cfg.Alone {
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
	cfg      TenantsRunConfig
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
	var runs []TenantsRun
	var errs []error
	for _, fair := range tb.cfg.Fair {
		for _, d := range tb.cfg.Deployments {
			r, err := tb.runOne(ctx, d, fair)
			errs = append(errs, err)
			if len(r.Rounds) > 0 {
				runs = append(runs, TenantsRun{Deployment: d, Fair: fair, Result: r})
			}
			if ctx.Err() != nil {
				return errors.Join(errs...)
			}
		}
	}
	if len(runs) > 0 {
		fmt.Fprintf(tb.out, "\nside by side:\n")
		errs = append(errs, ReportTenantsRuns(tb.out, runs))
	}
	return errors.Join(errs...)
}

// runOne starts deployment d, measures it under the flood, reports it and
// stops it.
func (tb *tenantsBench) runOne(ctx context.Context, d string, fair bool) (r TenantsResult, err error) {
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
	err = errors.Join(err, ReportTenants(tb.out, lr.Result))
	fmt.Fprintln(tb.out)
	return lr.Result, err
}

// runAlone measures the victim alone against two servers of each
// deployment, fairness on and off, in runs that alternate between them in
// the order on, off, off, on, … so that a drift of the machine falls on
// both alike.
func (tb *tenantsBench) runAlone(ctx context.Context) error {
	var alone []TenantsAlone
	var errs []error
	for _, d := range tb.cfg.Deployments {
		a, err := tb.aloneOne(ctx, d)
		errs = append(errs, err)
		alone = append(alone, a)
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Fprintf(tb.out, "\nthe victim alone, fairness on and off (on/off: the ratio of the two):\n")
	return errors.Join(append(errs, ReportTenantsAlone(tb.out, alone))...)
}

// aloneOne starts deployment d twice, fairness on and off, and measures
// the victim alone against the two in turn.
func (tb *tenantsBench) aloneOne(ctx context.Context, d string) (a TenantsAlone, err error) {
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
	for run := range tb.cfg.Rounds {
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
func (tb *tenantsBench) config(t *tenantsTarget, alone bool) TenantsConfig {
	cfg := tb.cfg
	rounds := cfg.Rounds
	if alone {
		rounds = 1
	}
	return TenantsConfig{
		URL: t.url, VictimKey: tb.victimKey, FloodKey: tb.floodKey,
		VictimAddr: "127.0.0.1", FloodAddr: "127.0.0.2",
		Concurrency: cfg.Concurrency, Duration: cfg.Duration, Rounds: rounds, Alone: alone,
		FloodConns: cfg.FloodConns, BatchSize: cfg.Batch,
		Hostile: cfg.Hostile, SlowConns: cfg.SlowConns, WSAnswerBytes: cfg.WSAnswer}
}

// measure runs the load generator against t with cfg and returns what it
// measured; name titles its progress line.
func (tb *tenantsBench) measure(ctx context.Context, t *tenantsTarget, cfg TenantsConfig, name string) (tenantsLoadResult, error) {
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
	ingress := append([]string{"--auth", "on", "--auth-file", tb.authPath, fmt.Sprintf("--fair=%t", fair)}, tb.cfg.ServerArgs...)
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
		worker, _, err := t.children.start(ctx, "worker", WorkerReadyLine, "--log-level", "info", "--log-format", "json", "worker",
			"--nats", natsURL, "--nats-token", token, "--metrics-listen", "")
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		ing, u, err := t.children.start(ctx, "ingress", IngressReadyLine, append([]string{"--log-level", "info", "--log-format", "json", "ingress",
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
		cpus, err := ProcessCPUs(n.p.Pid())
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

// ProcessCPUs reads the CPUs process pid may run on, as a list such as
// "0-1" or "0,2", from /proc/<pid>/status (Linux only).
func ProcessCPUs(pid int) (string, error) {
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
