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
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	// FloodNice, when not 0, runs the flood's load generator under
	// nice -n FloodNice: on the CPUs it shares with the victim's, a
	// positive value keeps it from delaying the victim's calls on the
	// client's side, so that what the victim measures is the server's.
	FloodNice int
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
	// Pin runs the servers on ServerCPUs and the load generators on
	// LoadCPUs (taskset -c lists) with taskset.
	Pin        bool
	ServerCPUs string
	LoadCPUs   string
	// ServerArgs are extra flags of the dev or ingress command.
	ServerArgs []string

	// Command starts the toolbus program (a program and its first
	// arguments) as the servers and the load generators; empty means
	// this program (os.Executable).
	Command []string
	// Env is added to this process's environment for the children.
	Env []string
}

// TenantsLoadChild is a load generator [RunTenants] starts as a process of
// its own (the hidden `toolbus bench tenants load`) for one side of the
// tenants scenario, as the JSON file specFile says: the victim's, which
// runs one round of its calls, drawing its progress on stderr when the
// file asks for it; or the flood's, which says on stderr once it floods,
// and floods until it gets SIGTERM or an interrupt. It prints what it
// measured on stdout as JSON.
func TenantsLoadChild(ctx context.Context, stdout, stderr io.Writer, specFile string) error {
	b, err := os.ReadFile(specFile)
	if err != nil {
		return fmt.Errorf("bench tenants load: --spec: %w", err)
	}
	var spec tenantsLoadSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("bench tenants load: --spec: %w", err)
	}
	cfg, err := spec.Config.withDefaults()
	if err != nil {
		return fmt.Errorf("bench tenants load: %w", err)
	}
	out := tenantsLoadResult{Pid: os.Getpid()}
	switch spec.Side {
	case victimSide:
		if spec.Progress != "" {
			cfg.Progress = StartProgress(stderr, spec.Progress)
			cfg.Progress.planTime(cfg.settle()+cfg.Duration, "req")
		}
		sides := newLocalSides(cfg)
		var errs tally
		out.Victim, err = sides.victimRound(ctx, &errs)
		cfg.Progress.Stop()
		sides.close()
		var first error
		if out.VictimErrors, first = errs.snapshot(); first != nil {
			out.FirstVictimError = first.Error()
		}
	case floodSide:
		// What the flood was answered is printed when it is stopped, so
		// the signal that stops it ends the context, not the process.
		sctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stopSignals()
		sides := newLocalSides(cfg)
		var answers tally
		stop, ferr := sides.flood(sctx, spec.Round, &answers)
		if ferr == nil {
			fmt.Fprintln(stderr, tenantsFloodReady)
			<-sctx.Done()
			ferr = stop()
		}
		sides.close()
		out.FloodAnswers, _ = answers.snapshot()
		err = ferr
	default:
		return fmt.Errorf("bench tenants load: --spec: side %q: want %s or %s", spec.Side, victimSide, floodSide)
	}
	var cerr error
	if out.CPUs, cerr = ProcessCPUs(os.Getpid()); cerr != nil {
		out.CPUsError = cerr.Error()
	}
	return errors.Join(err, json.NewEncoder(stdout).Encode(out))
}

// tenantsFloodReady is the line the flood's load generator prints on
// stderr once it floods: from then on SIGTERM stops the flood, not the
// process, which still has to print what the flood was answered.
const tenantsFloodReady = "bench tenants load: flooding until stopped"

// The sides of the tenants scenario a load generator runs.
const (
	victimSide = "victim"
	floodSide  = "flood"
)

// tenantsLoadSpec is what a tenants load generator runs.
type tenantsLoadSpec struct {
	// Side is victimSide or floodSide.
	Side   string
	Config TenantsConfig
	// Round is the flood's round, which keeps its idempotency keys apart
	// from those of the other rounds.
	Round int
	// Progress names the progress line the victim draws on standard
	// error; empty for none.
	Progress string
}

// tenantsLoadResult is what a tenants load generator measured, and where
// it ran.
type tenantsLoadResult struct {
	// Victim is the victim's round, VictimErrors its failed calls by
	// class and FirstVictimError one of them.
	Victim           Result
	VictimErrors     map[string]int64 `json:",omitempty"`
	FirstVictimError string           `json:",omitempty"`
	// FloodAnswers counts what the flood was answered, by class.
	FloodAnswers map[string]int64 `json:",omitempty"`
	Pid          int
	// CPUs are those the load generator may run on, as the kernel reports
	// its affinity; CPUsError says why they are empty.
	CPUs, CPUsError string
}

// RunTenants starts each deployment and fairness cfg names in turn, runs
// the tenants scenario against it from load generator children, the
// victim's and the flood's apart, reports it on out, and stops the
// deployment. It draws the victim's progress on progress unless it is
// nil.
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
		if tb.server, tb.load, err = pinned(command, cfg.ServerCPUs, cfg.LoadCPUs); err != nil {
			return fmt.Errorf("bench tenants: %w", err)
		}
	}
	if tb.dir, err = os.MkdirTemp("", "toolbus-bench-tenants-"); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tb.dir)) }()
	if err := tb.writeKeys(); err != nil {
		return err
	}

	fmt.Fprintf(out, "toolbus bench tenants: load average %s at the start\n", loadAverage())
	if cfg.FloodNice != 0 {
		fmt.Fprintf(out, "the flood's load generator runs under nice -n %d (a negative value needs the privilege to raise a priority, and nice says when it lacks it)\n", cfg.FloodNice)
	}
	if cfg.Pin {
		fmt.Fprintf(out, "pinned with taskset: the servers on CPUs %s, the load generators (the victim's and the flood's, in processes apart) on CPUs %s\n\n", cfg.ServerCPUs, cfg.LoadCPUs)
	} else {
		fmt.Fprintf(out, "not pinned (--pin=false): the servers and the load generators run where the kernel puts them\n\n")
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
	// server and load start this program as a server and as a load
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
	r, loads, err := tb.tenants(ctx, t, tb.config(t, false), d)
	if len(r.Rounds) == 0 {
		return r, err
	}
	// A run whose load generator failed part way still reports its rounds.
	fmt.Fprintf(tb.out, "%s\n", placement(t.placed, loads))
	err = errors.Join(err, ReportTenants(tb.out, r))
	fmt.Fprintln(tb.out)
	return r, err
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
			before, cpuErr := t.cpu()
			r, loads, err := tb.tenants(ctx, t, tb.config(t, true), fmt.Sprintf("%s alone", d))
			if err != nil {
				return a, err
			}
			a.Add(fair, r)
			if after, err := t.cpu(); cpuErr == nil && err == nil {
				a.AddCPU(fair, after-before)
			} else if a.CPUError == nil {
				a.CPUError = errors.Join(cpuErr, err)
			}
			q := r.Quiet
			fmt.Fprintf(tb.out, "run %d, --fair=%t: %.0f calls/s, p50 %v, p99 %v, %d failed; %s\n", run+1, fair,
				q.Throughput, q.P50.Round(time.Microsecond), q.P99.Round(time.Microsecond), q.Errors, placement(t.placed, loads))
		}
	}
	return a, nil
}

// config is the scenario the load generators run against t.
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

// tenants runs the scenario cfg against t, each side in load generator
// processes of its own, and returns what it measured and where the load
// generators ran; name titles the victim's progress line. The served
// process's memory is read from here.
func (tb *tenantsBench) tenants(ctx context.Context, t *tenantsTarget, cfg TenantsConfig, name string) (TenantsResult, []cpuPlacement, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return TenantsResult{}, nil, fmt.Errorf("bench tenants: %w", err)
	}
	pid := t.serving.Pid()
	cfg.RSS = func() (uint64, error) { return processRSS(pid) }
	sides := &loadSides{tb: tb, cfg: cfg, name: name}
	r, err := tenants(ctx, cfg, sides)
	return r, sides.placed, err
}

// loadSides runs each caller of the tenants scenario in load generator
// processes of its own: the victim in one a round, the flood in one a
// flooded round, which floods until it is stopped. The flood's client
// work is many times the victim's: in one process, the two would share
// its scheduler, and the victim's calls would wait on the flood's client
// as well as on the server.
type loadSides struct {
	tb   *tenantsBench
	cfg  TenantsConfig
	name string
	// rounds counts the victim's rounds, for its progress line.
	rounds int
	// placed is where the load generators ran, one entry for the
	// processes of each side that ran on the same CPUs.
	placed []cpuPlacement
}

var _ tenantSides = (*loadSides)(nil)

// loadWithin bounds a load generator's life: its round's settling
// quarter, its length and at most the loop's 5 s grace, and two minutes
// more for the wait for the first echo and the start of the process.
func (s *loadSides) loadWithin() time.Duration {
	return s.cfg.settle() + s.cfg.Duration + 5*time.Second + 2*time.Minute
}

func (s *loadSides) victimRound(ctx context.Context, errs *tally) (Result, error) {
	s.rounds++
	spec := tenantsLoadSpec{Side: victimSide, Config: s.cfg}
	if s.tb.progress != nil {
		spec.Progress = fmt.Sprintf("%s, round %d of %d", s.name, s.rounds, 2*s.cfg.Rounds)
	}
	rctx, cancel := context.WithTimeout(ctx, s.loadWithin())
	defer cancel()
	l, err := s.tb.startLoad(rctx, "the victim's load generator", spec, nil)
	if err != nil {
		return Result{}, err
	}
	lr, err := l.result(rctx, false)
	s.place(l.name, lr)
	var first error
	if lr.FirstVictimError != "" {
		first = errors.New(lr.FirstVictimError)
	}
	errs.merge(lr.VictimErrors, first)
	return lr.Victim, err
}

func (s *loadSides) flood(ctx context.Context, round int, answers *tally) (func() error, error) {
	// The flood runs while the victim's round does, and is bounded as it.
	fctx, cancel := context.WithTimeout(ctx, s.loadWithin()+time.Minute)
	l, err := s.tb.startLoad(fctx, "the flood's load generator", tenantsLoadSpec{Side: floodSide, Config: s.cfg, Round: round}, floodReadyLine)
	if err != nil {
		cancel()
		return nil, err
	}
	return func() error {
		defer cancel()
		lr, err := l.result(fctx, true)
		s.place(l.name, lr)
		answers.merge(lr.FloodAnswers, nil)
		return err
	}, nil
}

// place notes where the load generator name ran, as lr says.
func (s *loadSides) place(name string, lr tenantsLoadResult) {
	if lr.Pid == 0 {
		return // it said nothing
	}
	p := cpuPlacement{name: name, pids: []int{lr.Pid}, cpus: lr.CPUs}
	if lr.CPUsError != "" {
		p.err = errors.New(lr.CPUsError)
	}
	for i, q := range s.placed {
		if q.name == p.name && q.cpus == p.cpus && (q.err == nil) == (p.err == nil) {
			s.placed[i].pids = append(s.placed[i].pids, lr.Pid)
			return
		}
	}
	s.placed = append(s.placed, p)
}

// floodReadyLine is the line of the flood's load generator once it floods.
var floodReadyLine = regexp.MustCompile(regexp.QuoteMeta(tenantsFloodReady))

// loadChild is a load generator process and what it printed.
type loadChild struct {
	name           string
	p              *proc.Process
	specFile       string
	stdout, stderr bytes.Buffer
}

// startLoad starts a load generator for spec, named name in errors, and
// waits for its ready line when ready is not nil. ctx bounds its life.
func (tb *tenantsBench) startLoad(ctx context.Context, name string, spec tenantsLoadSpec, ready *regexp.Regexp) (*loadChild, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(tb.dir, spec.Side+"-*.json")
	if err != nil {
		return nil, err
	}
	l := &loadChild{name: name, specFile: f.Name()}
	if _, err := f.Write(b); err != nil {
		return nil, errors.Join(err, f.Close(), os.Remove(l.specFile))
	}
	if err := f.Close(); err != nil {
		return nil, errors.Join(err, os.Remove(l.specFile))
	}
	var errOut io.Writer = &l.stderr
	if spec.Progress != "" {
		errOut = io.MultiWriter(tb.progress, &l.stderr)
	}
	command, err := tb.loadCommand(spec.Side)
	if err != nil {
		return nil, errors.Join(err, os.Remove(l.specFile))
	}
	l.p, err = proc.Start(ctx, proc.Spec{Name: name,
		Command: append(command, "bench", "tenants", "load", "--spec", l.specFile),
		Env:     tb.env, Stdout: &l.stdout, Stderr: errOut, Ready: ready})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench tenants: %w", err), os.Remove(l.specFile))
	}
	return l, nil
}

// loadCommand returns the command that starts the load generator of
// side, but for its arguments: the flood's under nice when
// [TenantsRunConfig.FloodNice] asks for it.
func (tb *tenantsBench) loadCommand(side string) ([]string, error) {
	command := tb.load[:len(tb.load):len(tb.load)]
	if side != floodSide || tb.cfg.FloodNice == 0 {
		return command, nil
	}
	nice, err := exec.LookPath("nice")
	if err != nil {
		return nil, fmt.Errorf("bench tenants: --flood-nice needs nice (%w): install coreutils or drop the flag", err)
	}
	return append([]string{nice, "-n", strconv.Itoa(tb.cfg.FloodNice)}, command...), nil
}

// result waits for the load generator to end, after asking it to when
// stop is set, and reads what it measured; ctx is the one it was started
// with.
func (l *loadChild) result(ctx context.Context, stop bool) (tenantsLoadResult, error) {
	defer os.Remove(l.specFile)
	var werr error
	if stop {
		werr = l.p.Stop()
	} else {
		werr = l.p.Wait()
	}
	var lr tenantsLoadResult
	if jerr := json.Unmarshal(l.stdout.Bytes(), &lr); jerr != nil && werr == nil {
		return lr, fmt.Errorf("bench tenants: %s's result: %w", l.name, jerr)
	}
	if werr != nil {
		return lr, fmt.Errorf("bench tenants: %s: %w: %s", l.name, errors.Join(werr, ctx.Err()), strings.TrimSpace(l.stderr.String()))
	}
	return lr, nil
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
	t := &tenantsTarget{children: &children{command: tb.server, load: tb.load, env: tb.env, dir: dir}}
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
		// The split deployment of the echo bench, with authentication on.
		sp, err := t.children.startSplit(ctx, nil, ingress)
		if err != nil {
			return nil, errors.Join(err, t.stopAll())
		}
		t.url, t.serving, t.what = sp.url, sp.ingress, "toolbus nats + toolbus worker + toolbus ingress "+shown
		named = append(named, []struct {
			name string
			p    *proc.Process
		}{{"toolbus nats", sp.nats}, {"toolbus worker", sp.worker}, {"toolbus ingress", sp.ingress}}...)
	}
	for _, n := range named {
		cpus, err := ProcessCPUs(n.p.Pid())
		t.placed = append(t.placed, cpuPlacement{name: n.name, pids: []int{n.p.Pid()}, cpus: cpus, err: err})
	}
	return t, nil
}

// cpuPlacement is where processes may run: the CPUs of their affinity as
// the kernel reports it, or why they could not be read.
type cpuPlacement struct {
	name string
	pids []int
	cpus string
	err  error
}

// placement says on which CPUs each process of the server and each load
// generator may run, and whether the two groups are apart: a figure taken
// with both on every CPU measures the two competing for them.
func placement(server, loads []cpuPlacement) string {
	var parts []string
	apart := len(loads) > 0
	for _, p := range append(server[:len(server):len(server)], loads...) {
		pids := make([]string, len(p.pids))
		for i, pid := range p.pids {
			pids[i] = strconv.Itoa(pid)
		}
		which := "pid " + strings.Join(pids, ", ")
		if len(pids) > 1 {
			which = "pids " + strings.Join(pids, ", ")
		}
		if p.err != nil || p.cpus == "" {
			parts = append(parts, fmt.Sprintf("%s (%s) on CPUs unknown", p.name, which))
			apart = false
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s) on CPUs %s", p.name, which, p.cpus))
	}
	for _, sp := range server {
		for _, lp := range loads {
			// disjoint counts an unreadable list as sharing.
			if !disjoint(sp.cpus, lp.cpus) {
				apart = false
			}
		}
	}
	how := "the server and the load generators are pinned apart"
	if !apart {
		how = "the server and the load generators are not pinned apart: they may share CPUs"
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
// processCPU returns the CPU time, user and system, that process pid has
// used, from /proc/<pid>/stat (Linux only), in the kernel's clock ticks of
// 10 ms (USER_HZ, 100 on every Linux toolbus runs on).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time: %w (only Linux has /proc)", err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted are those after it, the process state first.
	_, rest, ok := bytes.Cut(b, []byte(") "))
	fields := strings.Fields(string(rest))
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("read the server's CPU time: /proc/%d/stat has %d fields after the name, want 13 or more", pid, len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] { // utime and stime, the 14th and 15th fields
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read the server's CPU time: %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// pinned returns command run under taskset on the CPUs serverCPUs, for
// the servers, and on loadCPUs, for the load generators (taskset -c
// lists).
func pinned(command []string, serverCPUs, loadCPUs string) (server, load []string, err error) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, nil, fmt.Errorf("--pin needs taskset (%w): install it (util-linux) or give --pin=false", err)
	}
	// A list taskset refuses is named now, before any process starts.
	if probe, err := exec.LookPath("true"); err == nil {
		for _, f := range []struct{ flag, list string }{{"--server-cpus", serverCPUs}, {"--load-cpus", loadCPUs}} {
			if out, err := exec.Command(taskset, "-c", f.list, probe).CombinedOutput(); err != nil {
				return nil, nil, &cpuListError{flag: f.flag, list: f.list, said: strings.TrimSpace(string(out))}
			}
		}
	}
	return append([]string{taskset, "-c", serverCPUs}, command...), append([]string{taskset, "-c", loadCPUs}, command...), nil
}

// cpuListError is a CPU list that taskset refused.
type cpuListError struct {
	flag, list string
	said       string // what taskset said
}

func (e *cpuListError) Error() string {
	return fmt.Sprintf("%s %q: taskset refused it (%s): give CPUs of this machine (0 to %d), such as 0 or 1-3",
		e.flag, e.list, e.said, runtime.NumCPU()-1)
}

// cpu returns the CPU time every process of t has used so far.
func (t *tenantsTarget) cpu() (time.Duration, error) {
	t.mu.Lock()
	ps := slices.Clone(t.all)
	t.mu.Unlock()
	return cpuOf(ps...)()
}

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
