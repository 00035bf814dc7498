package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The targets of the comparison measured from outside, by name: the
// names [OutsideVerdicts] looks for among the [Target]s of a [Matrix].
const (
	TargetPlain        = "plain net/http"
	TargetProxy        = "reverse proxy"
	TargetDev          = "toolbus dev"
	TargetSplit        = "toolbus split"
	TargetBatch        = "toolbus dev, 10-call batch"
	TargetDevAccessLog = "toolbus dev --access-log"
	// TargetDevBus and TargetBatchBus are [TargetDev] and [TargetBatch]
	// with every call sent over the embedded NATS server, none run in
	// the process without the bus.
	TargetDevBus   = "toolbus dev --local-calls=false"
	TargetBatchBus = "toolbus dev --local-calls=false, 10-call batch"
)

// The goals of the comparison measured from outside, on a 2-core machine.
// [GoalRatio] and [GoalAddedMean] apply to [TargetDev] against
// [TargetPlain].
const (
	// GoalSplitOverProxy is the least throughput of the split deployment
	// as a multiple of the reverse proxy's, at [GoalRatioConcurrency].
	GoalSplitOverProxy = 2.0
	// GoalBatchCost is the most a 10-call batch may cost against one call:
	// the requests/s of single calls over the requests/s of 10-call
	// batches, at [GoalRatioConcurrency].
	GoalBatchCost = 3.0
	// BatchCalls is the number of echo calls in [TargetBatch]'s requests.
	BatchCalls = 10
)

// Row is what every target of a [Matrix] measured at one concurrency, in
// the order of the targets.
type Row struct {
	Concurrency int
	Sides       []Side
}

// Side returns the side of the target named name, and whether it ran.
func (r Row) Side(name string) (Side, bool) {
	for _, s := range r.Sides {
		if s.Target.Name == name {
			return s, true
		}
	}
	return Side{}, false
}

// Matrix runs cfg.Load (default [Load]) against every target at each of
// cfg.Concurrency, in rounds that take the targets in turn (a, b, c, a, b,
// c, …), so that a burst of noise from elsewhere hits one round rather
// than one target. A target's Body, when set, replaces cfg.Body. It
// returns one [Row] per concurrency; when a round fails it returns the rows
// finished so far and the error.
func Matrix(ctx context.Context, targets []Target, cfg CompareConfig) ([]Row, error) {
	if len(targets) == 0 {
		return nil, errors.New("bench: matrix without targets")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	load := cfg.Load
	perRound := cfg.Warmup + cfg.Duration
	cfg.Progress.planTime(time.Duration(len(cfg.Concurrency)*cfg.Rounds*len(targets))*perRound, "req")
	measured := cfg.measured()
	var out []Row
	for _, c := range cfg.Concurrency {
		rounds := make([][]Result, len(targets))
		cpu := make([]time.Duration, len(targets))
		cpuErr := make([]error, len(targets))
		for range cfg.Rounds {
			for i, t := range targets {
				var before time.Duration
				if t.CPU != nil && cpuErr[i] == nil {
					before, cpuErr[i] = t.CPU()
				}
				res, err := load(ctx, cfg.round(t, c))
				if err != nil {
					return out, fmt.Errorf("bench: compare %s at concurrency %d: %w", t.Name, c, err)
				}
				if t.CPU != nil && cpuErr[i] == nil {
					var after time.Duration
					if after, cpuErr[i] = t.CPU(); cpuErr[i] == nil {
						cpu[i] += time.Duration(float64(after-before) * measured)
					}
				}
				rounds[i] = append(rounds[i], res)
			}
		}
		row := Row{Concurrency: c}
		for i, t := range targets {
			side := mergeRounds(t, rounds[i])
			side.CPU, side.CPUError = cpu[i], cpuErr[i]
			row.Sides = append(row.Sides, side)
		}
		out = append(out, row)
	}
	return out, nil
}

// EchoBatch returns a batch of n echo calls with ids 1 to n, each with the
// params of [EchoRequest].
func EchoBatch(n int) string {
	b := []byte{'['}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCall(b, i+1, "echo", []byte(`{"message":"hello, toolbus"}`))
	}
	return string(append(b, ']'))
}

// OutsideVerdicts judges the goals of the comparison measured from outside
// on the rows of a [Matrix]: [TargetDev] against [TargetPlain] ([GoalRatio],
// [GoalAddedMean]), [TargetSplit] against [TargetProxy]
// ([GoalSplitOverProxy] at [GoalRatioConcurrency], a mean latency at
// [GoalAddedMeanConcurrency] no higher), and [TargetBatch] against
// [TargetDev] ([GoalBatchCost]); the same goals of [TargetDev] and
// [TargetBatch] for [TargetDevBus] and [TargetBatchBus]. A goal whose targets did not run yields
// no verdict; a side with errors misses.
func OutsideVerdicts(rows []Row) []Verdict {
	var vs []Verdict
	for _, r := range rows {
		plain, okPlain := r.Side(TargetPlain)
		proxy, okProxy := r.Side(TargetProxy)
		split, okSplit := r.Side(TargetSplit)
		for _, d := range [][2]string{{TargetDev, TargetBatch}, {TargetDevBus, TargetBatchBus}} {
			dev, okDev := r.Side(d[0])
			if okPlain && okDev {
				vs = append(vs, CompareVerdicts([]Comparison{pairOf(r.Concurrency, plain, dev)})...)
			}
			if batch, okBatch := r.Side(d[1]); okDev && okBatch && r.Concurrency == GoalRatioConcurrency {
				vs = append(vs, batchVerdict(r.Concurrency, dev, batch))
			}
		}
		if okProxy && okSplit && r.Concurrency == GoalRatioConcurrency {
			ratio := ratio(split, proxy)
			v := Verdict{
				Goal: fmt.Sprintf("%s echo throughput at concurrency %d ≥ %.1f× %s", TargetSplit, r.Concurrency, GoalSplitOverProxy, TargetProxy),
				Got:  fmt.Sprintf("%.2f×", ratio),
				Pass: ratio >= GoalSplitOverProxy,
			}
			v.Margin = margin(v.Pass, ratio, GoalSplitOverProxy, true)
			vs = append(vs, judgeErrors(v, split, proxy))
		}
		if okProxy && okSplit && r.Concurrency == GoalAddedMeanConcurrency {
			d := split.Result.Mean - proxy.Result.Mean
			v := Verdict{
				Goal: fmt.Sprintf("%s mean latency at concurrency %d ≤ %s's", TargetSplit, r.Concurrency, TargetProxy),
				Got:  fmt.Sprintf("%s vs %s", formatDuration(split.Result.Mean), formatDuration(proxy.Result.Mean)),
				Pass: d <= 0,
			}
			if v.Pass {
				v.Margin = formatDuration(-d) + " to spare"
			} else {
				v.Margin = "missed by " + formatDuration(d)
			}
			vs = append(vs, judgeErrors(v, split, proxy))
		}
	}
	return vs
}

// batchVerdict judges [GoalBatchCost]: the requests/s of dev's single calls
// over those of its 10-call batches.
func batchVerdict(concurrency int, dev, batch Side) Verdict {
	cost := 0.0
	if batch.Result.Throughput > 0 {
		cost = dev.Result.Throughput / batch.Result.Throughput
	}
	v := Verdict{
		Goal: fmt.Sprintf("a %d-call echo batch costs ≤ %.0f× one call (req/s of single calls ÷ req/s of batches, %s, concurrency %d)", BatchCalls, GoalBatchCost, dev.Target.Name, concurrency),
		Got:  fmt.Sprintf("%.2f×", cost),
		Pass: cost > 0 && cost <= GoalBatchCost,
	}
	v.Margin = margin(v.Pass, cost, GoalBatchCost, false)
	return judgeErrors(v, dev, batch)
}

func pairOf(c int, a, b Side) Comparison {
	return Comparison{Concurrency: c, Baseline: a, Subject: b, Ratio: ratio(b, a), AddedMean: b.Result.Mean - a.Result.Mean}
}

// ratio is b's throughput over a's, 0 when a answered nothing.
func ratio(b, a Side) float64 {
	if a.Result.Throughput == 0 {
		return 0
	}
	return b.Result.Throughput / a.Result.Throughput
}

func margin(pass bool, got, goal float64, atLeast bool) string {
	d := got - goal
	if !atLeast {
		d = -d
	}
	if pass {
		return fmt.Sprintf("%.2f× to spare", d)
	}
	return fmt.Sprintf("missed by %.2f×", -d)
}

func judgeErrors(v Verdict, sides ...Side) Verdict {
	var notes []string
	for _, s := range sides {
		if s.Result.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s had %d errors, first: %v", s.Target.Name, s.Result.Errors, s.Result.FirstError))
		}
	}
	if len(notes) > 0 {
		v.Pass = false
		v.Margin = strings.Join(notes, "; ")
	}
	return v
}

// ReportMatrix writes a table of rows to w: per concurrency, each target's
// throughput (the median round), latencies, errors, per-round throughput
// and its throughput and mean latency against the first target's; then
// [OutsideVerdicts] and, per concurrency, a histogram of every target's
// latencies.
func ReportMatrix(w io.Writer, rows []Row) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no comparisons")
		return err
	}
	first := rows[0].Sides[0].Target.Name
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "echo, measured from a load generator process of its own; every target is a process (or processes) of its own; %d alternating rounds each, req/s the median round; "+
		"cpu/req is the CPU time of every process serving the target (a proxy and its backend, a split deployment's three) per request answered (a batch is one request), read from /proc\n",
		len(rows[0].Sides[0].Rounds))
	fmt.Fprintf(tw, "concurrency\ttarget\treq/s\tp50\tp90\tp99\tmean\tmax\tok\terrors\tvs %s\tcpu/req\trounds req/s\n", first)
	for _, r := range rows {
		base := r.Sides[0]
		for _, s := range r.Sides {
			res := s.Result
			rounds := make([]string, len(s.Rounds))
			for i, x := range s.Rounds {
				rounds[i] = strconv.FormatFloat(x, 'f', 0, 64)
			}
			vs := "-"
			if s.Target.Name != base.Target.Name {
				vs = fmt.Sprintf("%.2f× %s", ratio(s, base), signed(res.Mean-base.Result.Mean))
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
				r.Concurrency, s.Target.Name, res.Throughput,
				formatDuration(res.P50), formatDuration(res.P90), formatDuration(res.P99),
				formatDuration(res.Mean), formatDuration(res.Max), res.Requests, res.Errors, vs, cpuColumn(s, base), strings.Join(rounds, " "))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, s := range r.Sides {
			if s.CPUError != nil {
				if _, err := fmt.Fprintf(w, "cpu/req of %s at concurrency %d unknown: %v\n", s.Target.Name, r.Concurrency, s.CPUError); err != nil {
					return err
				}
			}
		}
	}
	if err := writeVerdicts(w, OutsideVerdicts(rows)...); err != nil {
		return err
	}
	for _, r := range rows {
		var series []chartSeries
		for _, s := range r.Sides {
			series = append(series, chartSeries{s.Target.Name, s.Result})
		}
		if err := writeChart(w, fmt.Sprintf("echo latency at concurrency %d", r.Concurrency), series...); err != nil {
			return err
		}
	}
	return nil
}

// cpuColumn is s's CPU time per request, and its ratio to base's when s
// is not base; "-" when it is not known.
func cpuColumn(s, base Side) string {
	d, ok := s.CPUPerRequest()
	if !ok {
		return "-"
	}
	text := formatDuration(d)
	if b, okBase := base.CPUPerRequest(); okBase && b > 0 && s.Target.Name != base.Target.Name {
		text += fmt.Sprintf(" (%.2f×)", float64(d)/float64(b))
	}
	return text
}

// resultJSON is how a [Result] travels from a load generator process: its
// figures and its histogram, as bucket index and count pairs.
type resultJSON struct {
	Concurrency int       `json:"concurrency"`
	Requests    int64     `json:"requests"`
	Errors      int64     `json:"errors"`
	FirstError  string    `json:"first_error,omitempty"`
	ElapsedNS   int64     `json:"elapsed_ns"`
	Throughput  float64   `json:"throughput"`
	MeanNS      int64     `json:"mean_ns"`
	P50NS       int64     `json:"p50_ns"`
	P90NS       int64     `json:"p90_ns"`
	P99NS       int64     `json:"p99_ns"`
	MaxNS       int64     `json:"max_ns"`
	Buckets     [][2]int  `json:"buckets"`
	Sum         float64   `json:"sum_ns"`
	MinMax      [2]uint64 `json:"min_max_ns"`
}

// MarshalJSON encodes r with its latency histogram, so that a Result
// measured by another process merges with others as one measured here.
func (r Result) MarshalJSON() ([]byte, error) {
	j := resultJSON{
		Concurrency: r.Concurrency, Requests: r.Requests, Errors: r.Errors,
		ElapsedNS: int64(r.Elapsed), Throughput: r.Throughput,
		MeanNS: int64(r.Mean), P50NS: int64(r.P50), P90NS: int64(r.P90), P99NS: int64(r.P99), MaxNS: int64(r.Max),
		Buckets: [][2]int{},
	}
	if r.FirstError != nil {
		j.FirstError = r.FirstError.Error()
	}
	if h := r.hist; h != nil {
		for i, c := range h.counts {
			if c > 0 {
				j.Buckets = append(j.Buckets, [2]int{i, int(c)})
			}
		}
		j.Sum, j.MinMax = h.sum, [2]uint64{h.min, h.max}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what [Result.MarshalJSON] wrote.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	h := new(histogram)
	for _, bc := range j.Buckets {
		if bc[0] < 0 || bc[0] >= nBuckets || bc[1] < 0 {
			return fmt.Errorf("bench: result histogram bucket %d of %d", bc[0], bc[1])
		}
		h.counts[bc[0]] += uint64(bc[1])
		h.n += uint64(bc[1])
	}
	h.sum, h.min, h.max = j.Sum, j.MinMax[0], j.MinMax[1]
	*r = Result{
		Concurrency: j.Concurrency, Requests: j.Requests, Errors: j.Errors,
		Elapsed: time.Duration(j.ElapsedNS), Throughput: j.Throughput,
		Mean: time.Duration(j.MeanNS), P50: time.Duration(j.P50NS), P90: time.Duration(j.P90NS),
		P99: time.Duration(j.P99NS), Max: time.Duration(j.MaxNS), hist: h,
	}
	if j.FirstError != "" {
		r.FirstError = errors.New(j.FirstError)
	}
	return nil
}
