package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// InFlightSplitRunConfig is what [RunInFlightSplit] measures: the flags of
// `toolbus bench inflight-split`.
type InFlightSplitRunConfig struct {
	// Binaries are the toolbus programs run as the deployment's
	// processes, each once a round, in this order; none means this
	// program (os.Executable).
	Binaries []string
	// Rounds is the number of rounds (default 1).
	Rounds int
	// Batches, Calls and Sleep are those of the in-flight scenario
	// ([InFlightConfig]): defaults 10, 1000 and 3s.
	Batches, Calls int
	Sleep          time.Duration
}

// defaults fills in the zero fields and checks the others.
func (cfg *InFlightSplitRunConfig) defaults() error {
	if cfg.Rounds == 0 {
		cfg.Rounds = 1
	}
	cfg.Batches, cfg.Calls, cfg.Sleep = inFlightDefaults(cfg.Batches, cfg.Calls, cfg.Sleep)
	switch {
	case cfg.Rounds < 0:
		return fmt.Errorf("bench inflight-split: --rounds %d: want at least one", cfg.Rounds)
	case cfg.Batches < 0 || cfg.Calls < 0:
		return fmt.Errorf("bench inflight-split: --batches %d, --calls %d: want at least one of each", cfg.Batches, cfg.Calls)
	case cfg.Sleep < time.Millisecond:
		return fmt.Errorf("bench inflight-split: --sleep %v: want at least 1ms, the unit of sleep's ms", cfg.Sleep)
	}
	return nil
}

// splitArgs are the flags of the worker and of the ingress, besides those
// [children.startSplit] gives, that let every call of cfg be in flight at
// once: the worker runs twice as many sleep calls at once, the ingress
// admits 2,000 more than them and runs a whole batch at once, without
// authentication. For 10,000 calls in batches of 1,000 they are the
// flags the goal was first measured with: --concurrency 20000 and --auth
// off --max-in-flight 12000 --batch-concurrency 1000.
func (cfg InFlightSplitRunConfig) splitArgs() (worker, ingress []string) {
	n := cfg.Batches * cfg.Calls
	return []string{"--concurrency", strconv.Itoa(2 * n)},
		[]string{"--auth", "off", "--max-in-flight", strconv.Itoa(n + 2000), "--batch-concurrency", strconv.Itoa(cfg.Calls)}
}

// inFlightSplitWithin bounds a round, besides the sleep: each of the three
// children ready within a minute, the first echo answered within one,
// the calls within a minute after their sleep (as [InFlight] bounds
// them), and the children stopped within ten seconds each.
const inFlightSplitWithin = 6 * time.Minute

// RunInFlightSplit measures the in-flight scenario through one ingress of
// a split deployment and reports it on out. Each round starts, for each
// program of cfg.Binaries in turn, a NATS server with a token, a worker
// and an ingress from that program on loopback TCP, waits until an echo
// call is answered, runs [InFlight] against the ingress while it reads
// the resident memory of the three processes, reports the round and
// stops the three. Taking the programs in turn, round after round, lets
// a change of the machine fall on all of them alike. With more than one
// round in all, a table puts the rounds side by side at the end.
//
// A round is bounded in time, and its children are stopped when it ends,
// when ctx ends, or when it fails. The first round that fails ends the
// run: it is reported when its calls were sent, and its error returned.
func RunInFlightSplit(ctx context.Context, out io.Writer, cfg InFlightSplitRunConfig) error {
	if os.Getenv(ChildEnv) != "" {
		return fmt.Errorf("bench inflight-split: this process was started by a bench (%s is set) and starts no processes of its own", ChildEnv)
	}
	if err := cfg.defaults(); err != nil {
		return err
	}
	if len(cfg.Binaries) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench inflight-split: cannot find this program to start the deployment (%w): give --binary", err)
		}
		cfg.Binaries = []string{self}
	}
	worker, ingress := cfg.splitArgs()
	fmt.Fprintf(out, "toolbus bench inflight-split: %d batches of %d sleep calls of %s at once, each on a connection of its own, through one ingress of a split deployment on 127.0.0.1 (toolbus nats with a token; toolbus worker %s; toolbus ingress %s); rounds: %d, each running %s in turn; load average %s at the start; MB = 10⁶ bytes\n",
		cfg.Batches, cfg.Calls, formatDuration(cfg.Sleep), strings.Join(worker, " "), strings.Join(ingress, " "),
		cfg.Rounds, strings.Join(cfg.Binaries, ", "), loadAverage())
	var rounds []InFlightSplitResult
	var err error
run:
	for round := 1; round <= cfg.Rounds; round++ {
		for _, bin := range cfg.Binaries {
			var r InFlightSplitResult
			r, err = inFlightSplitRound(ctx, out, round, bin, cfg)
			if r.InFlight.Wall > 0 {
				rounds = append(rounds, r)
				fmt.Fprintln(out)
				err = errors.Join(err, ReportInFlightSplit(out, r))
			}
			if err != nil {
				break run
			}
		}
	}
	if len(rounds) > 1 {
		fmt.Fprintf(out, "\nside by side, in the order they ran:\n")
		err = errors.Join(err, ReportInFlightSplitRuns(out, rounds))
	}
	fmt.Fprintf(out, "\nload average %s at the end\n", loadAverage())
	return err
}

// inFlightSplitRound starts the split deployment from bin, measures the
// calls in flight through its ingress, and stops it.
func inFlightSplitRound(ctx context.Context, out io.Writer, round int, bin string, cfg InFlightSplitRunConfig) (r InFlightSplitResult, err error) {
	r = InFlightSplitResult{Round: round, Binary: bin}
	ctx, cancel := context.WithTimeout(ctx, inFlightSplitWithin+cfg.Sleep)
	defer cancel()
	defer func() {
		if err != nil {
			err = fmt.Errorf("bench inflight-split: round %d, %s: %w", round, bin, err)
		}
	}()
	dir, err := os.MkdirTemp("", "toolbus-bench-inflight-split-")
	if err != nil {
		return r, err
	}
	cs := &children{command: []string{bin}, load: []string{bin}, env: []string{ChildEnv + "=1"}, dir: dir}
	defer func() { err = errors.Join(err, cs.stopAll(), os.RemoveAll(dir)) }()
	worker, ingress := cfg.splitArgs()
	sp, err := cs.startSplit(ctx, worker, ingress)
	if err != nil {
		return r, err
	}
	if err := waitAnswers(ctx, Target{Name: "the split deployment's ingress", URL: sp.url}); err != nil {
		return r, err
	}
	mem := splitMemory{seen: [3]Resident{{Pid: sp.ingress.Pid()}, {Pid: sp.worker.Pid()}, {Pid: sp.nats.Pid()}}}
	r.InFlight, err = InFlight(ctx, InFlightConfig{URL: sp.url, Batches: cfg.Batches, Calls: cfg.Calls, Sleep: cfg.Sleep, RSS: mem.sample})
	r.Ingress, r.Worker, r.NATS = mem.seen[0], mem.seen[1], mem.seen[2]
	return r, err
}

// splitMemory reads the resident memory of a split deployment's ingress,
// worker and NATS server together, each time [InFlight] reads the
// ingress's: before it sends the calls, then every 10ms until the last
// answer, so that the three cover the same span. It is not safe for
// concurrent use; InFlight reads from one goroutine.
type splitMemory struct {
	// seen are the memory of the ingress, the worker and the NATS
	// server, in this order, each with its pid set before the first
	// read.
	seen [3]Resident
	read bool
}

// sample reads the three processes' memory and returns the ingress's. The
// first read fails when any of them cannot be read; a later one only
// when the ingress's cannot, and a worker or server that cannot be read
// then keeps the peak it had.
func (m *splitMemory) sample() (uint64, error) {
	var rss [3]uint64
	for i, p := range m.seen {
		v, err := processRSS(p.Pid)
		if err != nil && (i == 0 || !m.read) {
			return 0, err
		}
		rss[i] = v
	}
	for i, v := range rss {
		if !m.read {
			m.seen[i].Before = v
		}
		m.seen[i].Peak = max(m.seen[i].Peak, v)
	}
	m.read = true
	return rss[0], nil
}
