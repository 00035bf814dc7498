package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// GoalScaleRatio is the least throughput N workers must reach, as a
// fraction of N times one worker's throughput in the same run, when
// offered [GoalScaleOffered] times the cluster's capacity.
const GoalScaleRatio = 0.9

// GoalScaleOffered is the load, as a multiple of the cluster's capacity,
// that [GoalScaleRatio] is judged at.
const GoalScaleOffered = 2

// A ScaleCluster is the cluster [Scale] measures: an ingress in front of a
// bus and a pool of workers whose size Scale sets.
type ScaleCluster interface {
	// SetWorkers starts or stops workers until n serve, and returns once
	// they all take calls.
	SetWorkers(ctx context.Context, n int) error
}

// ScaleConfig configures [Scale].
type ScaleConfig struct {
	// URL is the ingress's JSON-RPC endpoint. Required.
	URL string
	// Cluster sets the number of workers. Required.
	Cluster ScaleCluster
	// Workers lists the pool sizes measured, in order (default 1, 2, 4,
	// 8, 16). The first should be 1: every ratio is taken to it.
	Workers []int
	// Offered lists the loads, as multiples of the cluster's capacity (a
	// worker's Slots times the number of workers), each run in turn at
	// every pool size (default [GoalScaleOffered]).
	Offered []float64
	// Slots is the calls of the tool one worker runs at once (default 4).
	Slots int
	// Sleep is how long the tool sleeps per call (default 50ms).
	Sleep time.Duration
	// Warmup and Duration are the unmeasured and measured parts of each
	// point (defaults 1s and 3s).
	Warmup, Duration time.Duration
	// Progress, when not nil, counts the calls. Optional.
	Progress *Progress
}

// ScalePoint is one pool size at one offered load.
type ScalePoint struct {
	Workers int
	// Offered is the load as a multiple of the pool's capacity;
	// Concurrency the concurrent calls it was.
	Offered     float64
	Concurrency int
	Result      Result
	// Ratio is Result's throughput over Workers times the one-worker
	// throughput at the same offered load; 0 when there is none.
	Ratio float64
	// Idle is the share of the machine's CPU time that was idle while
	// the point ran, from 0 to 1; negative when it could not be read
	// (it is read from /proc/stat, on Linux). A point with little idle
	// time measures the machine's CPU, not the dispatch.
	Idle float64
}

// ScaleResult is what [Scale] measured.
type ScaleResult struct {
	Slots  int
	Sleep  time.Duration
	Points []ScalePoint
}

// sleepBody is the call the scale scenarios send.
func sleepBody(d time.Duration) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":%d}}`, d.Milliseconds())
}

func (cfg *ScaleConfig) defaults() error {
	if err := checkURL(cfg.URL); err != nil {
		return fmt.Errorf("bench: scale: %w", err)
	}
	if cfg.Cluster == nil {
		return errors.New("bench: scale: no cluster")
	}
	if len(cfg.Workers) == 0 {
		cfg.Workers = []int{1, 2, 4, 8, 16}
	}
	if len(cfg.Offered) == 0 {
		cfg.Offered = []float64{GoalScaleOffered}
	}
	for _, n := range cfg.Workers {
		if n <= 0 {
			return fmt.Errorf("bench: scale: %d workers: want at least one", n)
		}
	}
	for _, o := range cfg.Offered {
		if o <= 0 {
			return fmt.Errorf("bench: scale: offered load %g: want a positive multiple of the capacity", o)
		}
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.Sleep <= 0 {
		cfg.Sleep = 50 * time.Millisecond
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = time.Second
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	return nil
}

// Scale measures how throughput grows with the number of workers: for each
// pool size it sets the cluster's workers, then runs a closed loop of
// sleep calls at each offered load. It returns what it measured so far
// with the first error.
func Scale(ctx context.Context, cfg ScaleConfig) (ScaleResult, error) {
	if err := cfg.defaults(); err != nil {
		return ScaleResult{}, err
	}
	res := ScaleResult{Slots: cfg.Slots, Sleep: cfg.Sleep}
	body := sleepBody(cfg.Sleep)
	for _, n := range cfg.Workers {
		if err := cfg.Cluster.SetWorkers(ctx, n); err != nil {
			return res, fmt.Errorf("bench: scale to %d workers: %w", n, err)
		}
		for _, o := range cfg.Offered {
			conc := max(int(math.Round(o*float64(n*cfg.Slots))), 1)
			before, okBefore := readCPUTimes()
			r, err := Load(ctx, LoadConfig{URL: cfg.URL, Body: body, Concurrency: conc,
				Warmup: cfg.Warmup, Duration: cfg.Duration, progress: cfg.Progress})
			after, okAfter := readCPUTimes()
			idle := -1.0
			if okBefore && okAfter && after.total > before.total {
				idle = float64(after.idle-before.idle) / float64(after.total-before.total)
			}
			res.Points = append(res.Points, ScalePoint{Workers: n, Offered: o, Concurrency: conc, Result: r, Idle: idle})
			if err != nil {
				return res, err
			}
		}
	}
	res.setRatios()
	return res, nil
}

// setRatios fills in every point's ratio to the one-worker point of the
// same offered load.
func (r *ScaleResult) setRatios() {
	one := map[float64]float64{}
	for _, p := range r.Points {
		if p.Workers == 1 {
			one[p.Offered] = p.Result.Throughput
		}
	}
	for i := range r.Points {
		p := &r.Points[i]
		if base := one[p.Offered]; base > 0 {
			p.Ratio = p.Result.Throughput / (float64(p.Workers) * base)
		}
	}
}

// Verdicts judges [GoalScaleRatio] at every pool size of more than one
// worker offered [GoalScaleOffered] times its capacity. A point with
// failed calls misses.
func (r ScaleResult) Verdicts() []Verdict {
	var vs []Verdict
	for _, p := range r.Points {
		if p.Workers == 1 || p.Offered != GoalScaleOffered {
			continue
		}
		v := Verdict{
			Goal: fmt.Sprintf("%d workers offered %g× their capacity ≥ %.2f× %d × one worker's calls/s", p.Workers, p.Offered, GoalScaleRatio, p.Workers),
			Got:  fmt.Sprintf("%.2f×", p.Ratio),
			Pass: p.Ratio >= GoalScaleRatio && p.Result.Errors == 0,
		}
		switch {
		case p.Ratio == 0:
			v.Margin = "no one-worker figure to compare with"
		case p.Result.Errors > 0:
			v.Margin = fmt.Sprintf("%d calls failed: %v", p.Result.Errors, p.Result.FirstError)
		case v.Pass:
			v.Margin = fmt.Sprintf("%.2f to spare", p.Ratio-GoalScaleRatio)
		default:
			v.Margin = fmt.Sprintf("missed by %.2f", GoalScaleRatio-p.Ratio)
			if p.Idle >= 0 && p.Idle < scaleBusyIdle {
				v.Margin += fmt.Sprintf("; the machine's CPU was %.0f%% idle meanwhile, so this point measures the CPU the %d worker processes, the ingress and the load share, not how calls are dispatched",
					100*p.Idle, p.Workers)
			}
		}
		vs = append(vs, v)
	}
	return vs
}

// ReportScale writes r as a table, the curve of its ratios as a chart, and
// its verdicts.
func ReportScale(w io.Writer, r ScaleResult) error {
	fmt.Fprintf(w, "scale-out: sleep %v per call, %d calls at once per worker\n", r.Sleep, r.Slots)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// ideal is what a pool would serve were every slot always busy: a
	// figure beside the ratio that does not move with the one-worker
	// point's noise.
	ideal := float64(r.Slots) / r.Sleep.Seconds()
	fmt.Fprintln(tw, "workers\toffered\tcalls in flight\tcalls/s\tratio\tof ideal\tp50\tp99\terrors\tcpu idle\t")
	for _, p := range r.Points {
		ratio := "-"
		if p.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", p.Ratio)
		}
		idle := "-"
		if p.Idle >= 0 {
			idle = fmt.Sprintf("%.0f%%", 100*p.Idle)
		}
		fmt.Fprintf(tw, "%d\t%g×\t%d\t%.1f\t%s\t%.2f\t%s\t%s\t%d\t%s\t\n", p.Workers, p.Offered, p.Concurrency,
			p.Result.Throughput, ratio, p.Result.Throughput/(ideal*float64(p.Workers)), formatDuration(p.Result.P50), formatDuration(p.Result.P99), p.Result.Errors, idle)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := ChartScale(w, r); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeVerdicts(w, r.Verdicts()...)
}

// scaleChartWidth is the width of a ratio of 1 in a scale chart, in cells.
const scaleChartWidth = 40

// ChartScale draws the ratio of every point as a bar, one row per pool
// size and offered load, with the goal marked: a bar of full width is a
// ratio of 1, and '|' stands where [GoalScaleRatio] is.
func ChartScale(w io.Writer, r ScaleResult) error {
	goal := int(math.Round(GoalScaleRatio * scaleChartWidth))
	var b strings.Builder
	fmt.Fprintf(&b, "ratio to N × one worker (█ = %.3f, | = %.2f goal)\n", 1.0/scaleChartWidth, GoalScaleRatio)
	for _, p := range r.Points {
		cells := min(int(math.Round(p.Ratio*scaleChartWidth)), scaleChartWidth+10)
		row := []rune(strings.Repeat("█", cells) + strings.Repeat(" ", max(scaleChartWidth+1-cells, 0)))
		if goal < len(row) && row[goal] == ' ' {
			row[goal] = '|'
		}
		fmt.Fprintf(&b, "%3d workers %4g× │%s %.2f\n", p.Workers, p.Offered, strings.TrimRight(string(row), " "), p.Ratio)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FirstCallConfig configures [FirstCall].
type FirstCallConfig struct {
	// URL is the ingress's JSON-RPC endpoint; no worker serves sleep yet.
	// Required.
	URL string
	// Start starts a worker that serves sleep; it is called once the
	// callers are calling. Required.
	Start func(ctx context.Context) error
	// Sleep is how long the tool sleeps per call (default 50ms).
	Sleep time.Duration
	// Callers is the number of concurrent callers (default 4).
	Callers int
	// Timeout bounds the wait for the first answer (default 30s).
	Timeout time.Duration
}

// FirstCallResult is what [FirstCall] measured.
type FirstCallResult struct {
	// ToAnswer is the time from the worker's start to the first sleep
	// answered with a result; ToCall is the same less the tool's sleep:
	// about when the worker took its first call.
	ToAnswer, ToCall time.Duration
	// Refused counts the calls answered with an error before then.
	Refused int
}

// FirstCall measures how soon a new worker takes calls: callers keep
// calling sleep on an ingress that has no worker for it (each error
// answer is sent again at once), Start starts one, and the first result
// ends the measurement.
func FirstCall(ctx context.Context, cfg FirstCallConfig) (FirstCallResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return FirstCallResult{}, fmt.Errorf("bench: first call: %w", err)
	}
	if cfg.Start == nil {
		return FirstCallResult{}, errors.New("bench: first call: nothing to start")
	}
	if cfg.Sleep <= 0 {
		cfg.Sleep = 50 * time.Millisecond
	}
	if cfg.Callers <= 0 {
		cfg.Callers = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	client := newClient(cfg.Callers)
	defer client.CloseIdleConnections()
	body := sleepBody(cfg.Sleep)
	header := requestHeader(nil)
	want := []expectation{{id: []byte("1"), check: anyResult}}

	var (
		mu      sync.Mutex
		first   time.Time
		refused int
		started = make(chan struct{})
		done    = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
	)
	for range cfg.Callers {
		wg.Go(func() {
			var buf bytes.Buffer
			for ctx.Err() == nil {
				err := post(ctx, client, cfg.URL, header, body, &buf)
				if err == nil {
					err = verify(buf.Bytes(), false, want)
				}
				if err == nil {
					select {
					case <-started:
					default:
						continue // answered by a worker from before the start
					}
					now := time.Now()
					once.Do(func() {
						mu.Lock()
						first = now
						mu.Unlock()
						close(done)
					})
					return
				}
				mu.Lock()
				refused++
				mu.Unlock()
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	t0 := time.Now()
	close(started)
	err := cfg.Start(ctx)
	if err == nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("bench: first call: no answer within %v: %w", cfg.Timeout, ctx.Err())
		}
	}
	cancel()
	wg.Wait()
	if err != nil {
		return FirstCallResult{}, err
	}
	d := first.Sub(t0)
	return FirstCallResult{ToAnswer: d, ToCall: max(d-cfg.Sleep, 0), Refused: refused}, nil
}

// TwoIngressConfig configures [TwoIngresses].
type TwoIngressConfig struct {
	// URLs are the two ingresses' JSON-RPC endpoints, behind one bus.
	// Required.
	URLs [2]string
	// Concurrency is the calls in flight in each phase, split evenly
	// between the ingresses when both serve (default 32).
	Concurrency int
	// Sleep is how long the tool sleeps per call (default 50ms).
	Sleep time.Duration
	// Warmup and Duration are the unmeasured and measured parts of each
	// phase (defaults 1s and 3s).
	Warmup, Duration time.Duration
}

// TwoIngressResult is what [TwoIngresses] measured.
type TwoIngressResult struct {
	Concurrency int
	// One is the first ingress alone, with every caller; Both the two
	// ingresses together, each with half of them.
	One  Result
	Both [2]Result
}

// Total is the calls per second the two ingresses served together.
func (r TwoIngressResult) Total() float64 { return r.Both[0].Throughput + r.Both[1].Throughput }

// Verdict judges that both ingresses took calls and together served at
// least what one did alone.
func (r TwoIngressResult) Verdict() Verdict {
	v := Verdict{Goal: fmt.Sprintf("two ingresses: both serve, together ≥ %.2f× one alone", goalTwoIngresses),
		Got: fmt.Sprintf("%.1f + %.1f = %.1f calls/s, one alone %.1f", r.Both[0].Throughput, r.Both[1].Throughput, r.Total(), r.One.Throughput)}
	errs := r.One.Errors + r.Both[0].Errors + r.Both[1].Errors
	switch {
	case errs > 0:
		v.Margin = fmt.Sprintf("%d calls failed", errs)
	case r.Both[0].Requests == 0 || r.Both[1].Requests == 0:
		v.Margin = "an ingress served nothing"
	case r.One.Throughput <= 0:
		v.Margin = "one ingress alone served nothing"
	default:
		ratio := r.Total() / r.One.Throughput
		v.Pass = ratio >= goalTwoIngresses
		v.Margin = fmt.Sprintf("%.2f× one alone", ratio)
	}
	return v
}

// goalTwoIngresses is the least two ingresses must serve together, as a
// fraction of one alone. The workers bound both phases alike, so both
// serve the same up to the noise of a run; 5% is that noise on a busy
// two-core machine.
const goalTwoIngresses = 0.95

// TwoIngresses measures two ingresses behind the same bus: first the one
// alone, then both at once with half the callers each.
func TwoIngresses(ctx context.Context, cfg TwoIngressConfig) (TwoIngressResult, error) {
	for _, u := range cfg.URLs {
		if err := checkURL(u); err != nil {
			return TwoIngressResult{}, fmt.Errorf("bench: two ingresses: %w", err)
		}
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Sleep <= 0 {
		cfg.Sleep = 50 * time.Millisecond
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = time.Second
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	body := sleepBody(cfg.Sleep)
	res := TwoIngressResult{Concurrency: cfg.Concurrency}
	var err error
	res.One, err = Load(ctx, LoadConfig{URL: cfg.URLs[0], Body: body, Concurrency: cfg.Concurrency, Warmup: cfg.Warmup, Duration: cfg.Duration})
	if err != nil {
		return res, err
	}
	half := [2]int{cfg.Concurrency / 2, cfg.Concurrency - cfg.Concurrency/2}
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			res.Both[i], errs[i] = Load(ctx, LoadConfig{URL: cfg.URLs[i], Body: body, Concurrency: max(half[i], 1), Warmup: cfg.Warmup, Duration: cfg.Duration})
		})
	}
	wg.Wait()
	return res, errors.Join(errs[0], errs[1])
}

// ReportTwoIngresses writes r and its verdict.
func ReportTwoIngresses(w io.Writer, r TwoIngressResult) error {
	fmt.Fprintf(w, "two ingresses behind one bus, %d sleep calls in flight\n", r.Concurrency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tcalls/s\tp50\tp99\terrors\t")
	row := func(name string, x Result) {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%d\t\n", name, x.Throughput, formatDuration(x.P50), formatDuration(x.P99), x.Errors)
	}
	row("ingress A alone", r.One)
	row("A, beside B", r.Both[0])
	row("B, beside A", r.Both[1])
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeVerdicts(w, r.Verdict())
}

// ReportFirstCall writes r.
func ReportFirstCall(w io.Writer, r FirstCallResult, sleep time.Duration) error {
	_, err := fmt.Fprintf(w, "a new worker's first call: %s from its start to the first answer, %s less the %v sleep (%d calls answered with an error before)\n",
		formatDuration(r.ToAnswer), formatDuration(r.ToCall), sleep, r.Refused)
	return err
}

// scaleBusyIdle is the idle share of the CPU below which a missed scale
// point is said to be bound by the machine's CPU.
const scaleBusyIdle = 0.1

// cpuTimes are the machine's CPU time counters, in clock ticks: all of
// them, and the idle ones (idle and iowait).
type cpuTimes struct{ total, idle uint64 }

// readCPUTimes reads the first line of /proc/stat; false where there is
// none, or it cannot be read.
func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		// guest and guest_nice (the 9th and 10th) are already in user
		// and nice.
		if i >= 8 {
			break
		}
		t.total += n
		if i == 3 || i == 4 {
			t.idle += n
		}
	}
	return t, true
}
