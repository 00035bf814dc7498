package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
)

type benchScaleFlags struct {
	workers     []int
	offered     []float64
	slots       int
	sleep       time.Duration
	duration    time.Duration
	warmup      time.Duration
	binaries    []string
	skipFirst   bool
	skipIngress bool
	progress    string
}

func newBenchScaleCmd() *cobra.Command {
	var f benchScaleFlags
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Measure how throughput grows with the number of worker processes",
		Long: `scale starts, as child processes on loopback TCP, a NATS server ('toolbus
nats'), an ingress ('toolbus ingress') and as many workers ('toolbus worker
--concurrency') as each point needs, and loads the ingress from this process
with the demo tool sleep. For each pool size of --workers it offers each load
of --offered, a multiple of the pool's capacity (workers × --concurrency calls
at once), as that many concurrent callers, and prints calls/s, p50 and p99,
the ratio to the pool size times one worker's calls/s in the same run, how
idle the machine's CPU was meanwhile (a point on a CPU with no idle time
measures the machine, not the dispatch, and its MISS says so), and the
curve of those ratios as a chart, with PASS or MISS against 0.9 at 2×. Then it
measures how soon a worker started on a cluster with none takes its first
call, and two ingresses behind the same NATS server serving together.

With --binary given more than once, each program runs the whole scenario in
turn as the cluster's processes (the measuring one stays this program): the
curve of one build beside another's, in the same run. Every child is stopped
at the end.`,
		Example: `  toolbus bench scale
  toolbus bench scale --workers 1,16 --offered 2,1 --duration 5s
  toolbus bench scale --binary ./toolbus-before --binary ./toolbus`,
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
			if len(f.binaries) == 0 {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("bench scale: cannot find this program to start the cluster (%w): give --binary", err)
				}
				f.binaries = []string{self}
			}
			return runBenchScale(ctx, cmd.OutOrStdout(), newProgressStarter(progress), f)
		},
	}
	fl := cmd.Flags()
	fl.IntSliceVar(&f.workers, "workers", []int{1, 2, 4, 8, 16}, "worker pool sizes measured, in order; the first should be 1")
	fl.Float64SliceVar(&f.offered, "offered", []float64{bench.GoalScaleOffered, 1}, "loads offered at each pool size, as multiples of its capacity")
	fl.IntVar(&f.slots, "concurrency", 4, "calls of sleep one worker runs at once")
	fl.DurationVar(&f.sleep, "sleep", 50*time.Millisecond, "how long each sleep call sleeps")
	fl.DurationVar(&f.duration, "duration", 3*time.Second, "measured length of each point")
	fl.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured load before each point")
	fl.StringSliceVar(&f.binaries, "binary", nil, "toolbus program run as the cluster's processes, repeatable (default: this one)")
	fl.BoolVar(&f.skipFirst, "skip-first-call", false, "skip the time to a new worker's first call")
	fl.BoolVar(&f.skipIngress, "skip-ingresses", false, "skip the two ingresses")
	fl.StringVar(&f.progress, "progress", "auto", "progress line on standard error: auto (when standard error is a terminal), on or off")
	return cmd
}

func runBenchScale(ctx context.Context, out io.Writer, startProgress progressStarter, f benchScaleFlags) error {
	if len(f.workers) == 0 || slices.Min(f.workers) <= 0 {
		return fmt.Errorf("bench scale: --workers %v: want pool sizes of at least one", f.workers)
	}
	for i, bin := range f.binaries {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := benchScaleBinary(ctx, out, startProgress, bin, f); err != nil {
			return err
		}
	}
	return nil
}

// benchScaleBinary runs every scale scenario with bin as the cluster's
// processes.
func benchScaleBinary(ctx context.Context, out io.Writer, startProgress progressStarter, bin string, f benchScaleFlags) (err error) {
	c, err := startScaleCluster(ctx, bin, f.slots)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.stop()) }()
	fmt.Fprintf(out, "toolbus bench scale: cluster of %s (NATS at %s, ingress at %s)\n\n", bin, c.natsURL, c.urls[0])

	p := startProgress("scale")
	r, err := bench.Scale(ctx, bench.ScaleConfig{URL: c.urls[0], Cluster: c, Workers: f.workers, Offered: f.offered,
		Slots: f.slots, Sleep: f.sleep, Warmup: f.warmup, Duration: f.duration, Progress: p})
	p.Stop()
	if len(r.Points) > 0 {
		if rerr := bench.ReportScale(out, r); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}

	if !f.skipFirst {
		if err := c.SetWorkers(ctx, 0); err != nil {
			return err
		}
		fr, err := bench.FirstCall(ctx, bench.FirstCallConfig{URL: c.urls[0], Sleep: f.sleep,
			Start: func(ctx context.Context) error { return c.SetWorkers(ctx, 1) }})
		if err != nil {
			return err
		}
		fmt.Fprintln(out)
		if err := bench.ReportFirstCall(out, fr, f.sleep); err != nil {
			return err
		}
	}

	if !f.skipIngress {
		const workers = 4
		if err := c.SetWorkers(ctx, workers); err != nil {
			return err
		}
		if err := c.addIngress(ctx); err != nil {
			return err
		}
		conc := bench.GoalScaleOffered * workers * f.slots
		tr, err := bench.TwoIngresses(ctx, bench.TwoIngressConfig{URLs: [2]string{c.urls[0], c.urls[1]},
			Concurrency: conc, Sleep: f.sleep, Warmup: f.warmup, Duration: f.duration})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%d workers; ", workers)
		if err := bench.ReportTwoIngresses(out, tr); err != nil {
			return err
		}
	}
	return nil
}

// scaleCluster is the child processes of one scale run: a NATS server,
// its ingresses and its workers.
type scaleCluster struct {
	bin     string
	slots   int
	dir     string
	natsURL string
	nats    *benchChild
	ingress []*benchChild
	urls    []string
	workers []*benchChild
}

var _ bench.ScaleCluster = (*scaleCluster)(nil)

// startScaleCluster starts a NATS server and one ingress from bin.
func startScaleCluster(ctx context.Context, bin string, slots int) (*scaleCluster, error) {
	dir, err := os.MkdirTemp("", "toolbus-bench-scale-")
	if err != nil {
		return nil, err
	}
	c := &scaleCluster{bin: bin, slots: slots, dir: dir}
	c.nats, err = startBenchChild(bin, "--log-level", "warn", "nats", "--nats-listen", "127.0.0.1:0", "--no-auth", "--data", filepath.Join(dir, "nats"))
	if err == nil {
		var m []string
		m, err = c.nats.waitOutput(ctx, natsChildReady)
		if err == nil {
			c.natsURL = m[1]
			err = c.addIngress(ctx)
		}
	}
	if err != nil {
		return nil, errors.Join(err, c.stop())
	}
	return c, nil
}

// addIngress starts one more ingress and waits until it is ready.
func (c *scaleCluster) addIngress(ctx context.Context) error {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	in, err := startBenchChild(c.bin, "--log-level", "warn", "ingress", "--nats", c.natsURL, "--listen", addr, "--auth=off")
	if err != nil {
		return err
	}
	c.ingress = append(c.ingress, in)
	if err := in.waitReady(ctx, "http://"+addr+"/readyz"); err != nil {
		return err
	}
	c.urls = append(c.urls, "http://"+addr+"/rpc")
	return nil
}

// SetWorkers implements [bench.ScaleCluster]: it starts workers, each
// serving the demo tools with the cluster's concurrency, or stops the
// newest, until n run.
func (c *scaleCluster) SetWorkers(ctx context.Context, n int) error {
	for len(c.workers) > n {
		w := c.workers[len(c.workers)-1]
		c.workers = c.workers[:len(c.workers)-1]
		if err := w.stop(); err != nil {
			return err
		}
	}
	var added []*benchChild
	var ready []string
	for len(c.workers) < n {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		w, err := startBenchChild(c.bin, "--log-level", "warn", "worker", "--nats", c.natsURL, "--tools", "demo",
			"--concurrency", strconv.Itoa(c.slots), "--metrics-listen", addr)
		if err != nil {
			return err
		}
		c.workers = append(c.workers, w)
		added = append(added, w)
		ready = append(ready, "http://"+addr+"/readyz")
	}
	for i, w := range added {
		if err := w.waitReady(ctx, ready[i]); err != nil {
			return err
		}
	}
	return nil
}

// stop stops every child, workers first, and removes the cluster's files.
func (c *scaleCluster) stop() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	stopAll := func(cs []*benchChild) {
		for _, ch := range cs {
			wg.Go(func() {
				if err := ch.stop(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	stopAll(c.workers)
	stopAll(c.ingress)
	if c.nats != nil {
		stopAll([]*benchChild{c.nats})
	}
	c.workers, c.ingress, c.nats = nil, nil, nil
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// freeLoopbackAddr returns a loopback address with a port free a moment
// ago, for a child that must be told where to listen.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// benchChild is a child process of a bench run.
type benchChild struct {
	cmd    *exec.Cmd
	stdout *tailBuffer
	stderr *tailBuffer
	done   chan struct{}
	err    error // why it ended; read after done is closed
	once   sync.Once
	stopEr error
}

// benchChildWait bounds how long a child may take to become ready, and to
// stop once asked.
const benchChildWait = 30 * time.Second

func startBenchChild(bin string, args ...string) (*benchChild, error) {
	cmd := exec.Command(bin, args...)
	ch := &benchChild{cmd: cmd, stdout: &tailBuffer{max: 4 << 10}, stderr: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = ch.stdout, ch.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s %s: %w", bin, args[2], err)
	}
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	return ch, nil
}

func (ch *benchChild) name() string {
	return fmt.Sprintf("%s (pid %d)", ch.cmd.Args[3], ch.cmd.Process.Pid)
}

// poll calls ready every 20ms until it reports true, the child ends, ctx
// ends or [benchChildWait] passes.
func (ch *benchChild) poll(ctx context.Context, what string, ready func() bool) error {
	timeout := time.NewTimer(benchChildWait)
	defer timeout.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-ch.done:
			return fmt.Errorf("bench: %s ended before %s: %v; its last output: %s", ch.name(), what, ch.err, ch.stderr)
		case <-timeout.C:
			return fmt.Errorf("bench: %s not %s within %v; its last output: %s", ch.name(), what, benchChildWait, ch.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// waitOutput waits until the child's standard output matches re, and
// returns the match.
func (ch *benchChild) waitOutput(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	var m []string
	err := ch.poll(ctx, "ready", func() bool {
		m = re.FindStringSubmatch(ch.stdout.String())
		return m != nil
	})
	return m, err
}

// waitReady waits until url answers 200.
func (ch *benchChild) waitReady(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	return ch.poll(ctx, "ready at "+url, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// stop sends SIGTERM, kills the child when it has not ended within
// [benchChildWait], and returns why it ended if not at this request.
func (ch *benchChild) stop() error {
	ch.once.Do(func() {
		_ = ch.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(benchChildWait)
		defer t.Stop()
		select {
		case <-ch.done:
			var ee *exec.ExitError
			if ch.err != nil && !(errors.As(ch.err, &ee) && !ee.Exited()) {
				ch.stopEr = fmt.Errorf("bench: %s ended with %w; its last output: %s", ch.name(), ch.err, ch.stderr)
			}
		case <-t.C:
			_ = ch.cmd.Process.Kill()
			<-ch.done
			ch.stopEr = fmt.Errorf("bench: %s did not stop within %v of SIGTERM and was killed; its last output: %s", ch.name(), benchChildWait, ch.stderr)
		}
	})
	return ch.stopEr
}
