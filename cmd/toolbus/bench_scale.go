package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/internal/proc"
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
	nats    *proc.Process
	ingress []*proc.Process
	urls    []string
	workers []*proc.Process
}

var _ bench.ScaleCluster = (*scaleCluster)(nil)

// startScaleCluster starts a NATS server and one ingress from bin.
func startScaleCluster(ctx context.Context, bin string, slots int) (*scaleCluster, error) {
	dir, err := os.MkdirTemp("", "toolbus-bench-scale-")
	if err != nil {
		return nil, err
	}
	c := &scaleCluster{bin: bin, slots: slots, dir: dir}
	c.nats, err = startScaleChild(ctx, bin, natsChildReady, "--log-level", "warn", "nats", "--nats-listen", "127.0.0.1:0", "--no-auth", "--data", filepath.Join(dir, "nats"))
	if err == nil {
		c.natsURL = c.nats.Ready()[1]
		err = c.addIngress(ctx)
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
	in, err := startScaleChild(ctx, c.bin, nil, "--log-level", "warn", "ingress", "--nats", c.natsURL, "--listen", addr, "--auth=off")
	if err != nil {
		return err
	}
	c.ingress = append(c.ingress, in)
	if err := waitHTTPReady(ctx, in, "http://"+addr+"/readyz", benchChildWait); err != nil {
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
		if err := w.Stop(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	var added []*proc.Process
	var ready []string
	for len(c.workers) < n {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		w, err := startScaleChild(ctx, c.bin, nil, "--log-level", "warn", "worker", "--nats", c.natsURL, "--tools", "demo",
			"--concurrency", strconv.Itoa(c.slots), "--metrics-listen", addr)
		if err != nil {
			return err
		}
		c.workers = append(c.workers, w)
		added = append(added, w)
		ready = append(ready, "http://"+addr+"/readyz")
	}
	for i, w := range added {
		if err := waitHTTPReady(ctx, w, ready[i], benchChildWait); err != nil {
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
	stopAll := func(cs []*proc.Process) {
		for _, ch := range cs {
			wg.Go(func() {
				if err := ch.Stop(); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("bench: %w", err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	stopAll(c.workers)
	stopAll(c.ingress)
	if c.nats != nil {
		stopAll([]*proc.Process{c.nats})
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

// benchChildWait bounds how long a child may take to become ready, and to
// stop once asked.
const benchChildWait = 30 * time.Second

// startScaleChild starts bin with args, whose third names the command run,
// and, when ready is not nil, waits until it prints the line ready matches.
func startScaleChild(ctx context.Context, bin string, ready *regexp.Regexp, args ...string) (*proc.Process, error) {
	p, err := proc.Start(ctx, proc.Spec{Name: args[2], Command: append([]string{bin}, args...),
		Ready: ready, ReadyWithin: benchChildWait, StopWithin: benchChildWait})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return p, nil
}

// waitHTTPReady asks url every 20ms until it answers 200; it fails when p
// ends first, or within passes first.
func waitHTTPReady(ctx context.Context, p *proc.Process, url string, within time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Done():
			return fmt.Errorf("bench: %s ended before it was ready at %s (%v); its last output:\n%s", p, url, p.Err(), tailOrNone(p))
		case <-timeout.C:
			return fmt.Errorf("bench: %s was not ready at %s within %v; its last output:\n%s", p, url, within, tailOrNone(p))
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func tailOrNone(p *proc.Process) string {
	if t := p.Tail(); t != "" {
		return t
	}
	return "(none)"
}
