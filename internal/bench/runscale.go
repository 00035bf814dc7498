package bench

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

	"github.com/toolbus/toolbus/internal/proc"
)

// ScaleRunConfig is what [RunScale] measures: the flags of `toolbus bench
// scale`.
type ScaleRunConfig struct {
	// Workers are the worker pool sizes measured, in order; the first
	// should be 1.
	Workers []int
	// Offered are the loads offered at each pool size, as multiples of its
	// capacity.
	Offered []float64
	// Slots are the calls of sleep one worker runs at once.
	Slots int
	// Sleep is how long each sleep call sleeps.
	Sleep time.Duration
	// Duration is the measured length of each point, Warmup the unmeasured
	// load before it.
	Duration time.Duration
	Warmup   time.Duration
	// Binaries are the toolbus programs run, in turn, as the cluster's
	// processes; none means this program (os.Executable).
	Binaries []string
	// SkipFirstCall skips the time to a new worker's first call,
	// SkipIngresses the two ingresses.
	SkipFirstCall bool
	SkipIngresses bool
}

// RunScale runs every scale scenario with each program of cfg.Binaries
// in turn as the cluster's processes and reports them on out, drawing
// their progress on progress unless it is nil.
func RunScale(ctx context.Context, out, progress io.Writer, cfg ScaleRunConfig) error {
	if len(cfg.Binaries) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench scale: cannot find this program to start the cluster (%w): give --binary", err)
		}
		cfg.Binaries = []string{self}
	}
	if len(cfg.Workers) == 0 || slices.Min(cfg.Workers) <= 0 {
		return fmt.Errorf("bench scale: --workers %v: want pool sizes of at least one", cfg.Workers)
	}
	startProgress := newProgressStarter(progress)
	for i, bin := range cfg.Binaries {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := scaleBinary(ctx, out, startProgress, bin, cfg); err != nil {
			return err
		}
	}
	return nil
}

// scaleBinary runs every scale scenario with bin as the cluster's
// processes.
func scaleBinary(ctx context.Context, out io.Writer, startProgress progressStarter, bin string, cfg ScaleRunConfig) (err error) {
	c, err := startScaleCluster(ctx, bin, cfg.Slots)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.stop()) }()
	fmt.Fprintf(out, "toolbus bench scale: cluster of %s (NATS at %s, ingress at %s)\n\n", bin, c.natsURL, c.urls[0])

	p := startProgress("scale")
	r, err := Scale(ctx, ScaleConfig{URL: c.urls[0], Cluster: c, Workers: cfg.Workers, Offered: cfg.Offered,
		Slots: cfg.Slots, Sleep: cfg.Sleep, Warmup: cfg.Warmup, Duration: cfg.Duration, Progress: p})
	p.Stop()
	if len(r.Points) > 0 {
		if rerr := ReportScale(out, r); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}

	if !cfg.SkipFirstCall {
		if err := c.SetWorkers(ctx, 0); err != nil {
			return err
		}
		fr, err := FirstCall(ctx, FirstCallConfig{URL: c.urls[0], Sleep: cfg.Sleep,
			Start: func(ctx context.Context) error { return c.SetWorkers(ctx, 1) }})
		if err != nil {
			return err
		}
		fmt.Fprintln(out)
		if err := ReportFirstCall(out, fr, cfg.Sleep); err != nil {
			return err
		}
	}

	if !cfg.SkipIngresses {
		const workers = 4
		if err := c.SetWorkers(ctx, workers); err != nil {
			return err
		}
		if err := c.addIngress(ctx); err != nil {
			return err
		}
		conc := GoalScaleOffered * workers * cfg.Slots
		tr, err := TwoIngresses(ctx, TwoIngressConfig{URLs: [2]string{c.urls[0], c.urls[1]},
			Concurrency: conc, Sleep: cfg.Sleep, Warmup: cfg.Warmup, Duration: cfg.Duration})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%d workers; ", workers)
		if err := ReportTwoIngresses(out, tr); err != nil {
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

var _ ScaleCluster = (*scaleCluster)(nil)

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
	if err := waitHTTPReady(ctx, in, "http://"+addr+"/readyz", childWait); err != nil {
		return err
	}
	c.urls = append(c.urls, "http://"+addr+"/rpc")
	return nil
}

// SetWorkers implements [ScaleCluster]: it starts workers, each
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
		if err := waitHTTPReady(ctx, w, ready[i], childWait); err != nil {
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

// childWait bounds how long a child may take to become ready, and to
// stop once asked.
const childWait = 30 * time.Second

// startScaleChild starts bin with args, whose third names the command run,
// and, when ready is not nil, waits until it prints the line ready matches.
func startScaleChild(ctx context.Context, bin string, ready *regexp.Regexp, args ...string) (*proc.Process, error) {
	p, err := proc.Start(ctx, proc.Spec{Name: args[2], Command: append([]string{bin}, args...),
		Ready: ready, ReadyWithin: childWait, StopWithin: childWait})
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
