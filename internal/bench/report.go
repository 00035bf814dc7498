package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The goals of the bench command, on a 2-core machine.
const (
	// GoalRatio is the least throughput, as a fraction of the baseline's,
	// the subject must reach at concurrency GoalRatioConcurrency.
	GoalRatio = 0.5
	// GoalRatioConcurrency is the concurrency [GoalRatio] is judged at.
	GoalRatioConcurrency = 64
	// GoalAddedMean is the most mean latency the subject may add to the
	// baseline's at concurrency GoalAddedMeanConcurrency.
	GoalAddedMean = 60 * time.Microsecond
	// GoalAddedMeanConcurrency is the concurrency [GoalAddedMean] is judged
	// at.
	GoalAddedMeanConcurrency = 1
	// GoalFanOutSlack is how much longer than its ideal (one sleep) a
	// fan-out batch may take: 100 calls of 100ms in 130ms.
	GoalFanOutSlack = 30 * time.Millisecond
	// GoalSlowSlack is how much longer than its deadline a batch with one
	// slow call may take, every other call answered.
	GoalSlowSlack = 50 * time.Millisecond
	// GoalJobSubmits is the least rate of rpc.jobs.submit, per second, the
	// jobs scenario must reach.
	GoalJobSubmits = 5000
	// GoalJobPollP50 is the most median latency of rpc.jobs.get of an
	// existing job.
	GoalJobPollP50 = time.Millisecond
)

// Verdict says whether a measurement met one goal, and by how much.
type Verdict struct {
	// Goal states the goal, such as "toolbus echo throughput at concurrency
	// 64 ≥ 0.50× plain".
	Goal string
	// Got is what was measured.
	Got string
	// Pass reports whether the goal was met.
	Pass bool
	// Margin says how far the measurement is from the goal: to spare when
	// it passed, missed by when it did not, or why it could not be judged.
	Margin string
}

// String formats v as one line of a report, starting with its [Verdict.Word].
func (v Verdict) String() string {
	return fmt.Sprintf("%s  %s: got %s (%s)", v.Word(), v.Goal, v.Got, v.Margin)
}

// Word is PASS when v passed, MISS when not.
func (v Verdict) Word() string {
	if v.Pass {
		return "PASS"
	}
	return "MISS"
}

// CompareVerdicts judges the goals that apply to comparisons: the throughput
// ratio at [GoalRatioConcurrency] and the added mean latency at
// [GoalAddedMeanConcurrency]. A concurrency that was not measured yields no
// verdict. A side with errors misses its goal whatever its numbers, as its
// numbers do not measure working calls.
func CompareVerdicts(cs []Comparison) []Verdict {
	var vs []Verdict
	for _, c := range cs {
		a, b := c.Baseline, c.Subject
		errs := errorsNote(c)
		if c.Concurrency == GoalRatioConcurrency {
			v := Verdict{
				Goal: fmt.Sprintf("%s echo throughput at concurrency %d ≥ %.2f× %s", b.Target.Name, c.Concurrency, GoalRatio, a.Target.Name),
				Got:  fmt.Sprintf("%.2f×", c.Ratio),
				Pass: c.Ratio >= GoalRatio && errs == "",
			}
			switch {
			case errs != "":
				v.Margin = errs
			case v.Pass:
				v.Margin = fmt.Sprintf("%.2f× to spare", c.Ratio-GoalRatio)
			default:
				v.Margin = fmt.Sprintf("missed by %.2f×, %.0f%% short", GoalRatio-c.Ratio, 100*(GoalRatio-c.Ratio)/GoalRatio)
			}
			vs = append(vs, v)
		}
		if c.Concurrency == GoalAddedMeanConcurrency {
			v := Verdict{
				Goal: fmt.Sprintf("%s added mean latency at concurrency %d ≤ %s", b.Target.Name, c.Concurrency, GoalAddedMean),
				Got:  signed(c.AddedMean),
				Pass: c.AddedMean <= GoalAddedMean && errs == "",
			}
			switch {
			case errs != "":
				v.Margin = errs
			case v.Pass:
				v.Margin = formatDuration(GoalAddedMean-c.AddedMean) + " to spare"
			default:
				v.Margin = "missed by " + formatDuration(c.AddedMean-GoalAddedMean)
			}
			vs = append(vs, v)
		}
	}
	return vs
}

func errorsNote(c Comparison) string {
	var notes []string
	for _, s := range []Side{c.Baseline, c.Subject} {
		if s.Result.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s had %d errors, first: %v", s.Target.Name, s.Result.Errors, s.Result.FirstError))
		}
	}
	return strings.Join(notes, "; ")
}

// Verdict judges the fan-out goal: the median batch answered within
// [GoalFanOutSlack] of the ideal, every batch answered correctly.
func (r FanOutResult) Verdict() Verdict {
	goal := r.Ideal + GoalFanOutSlack
	return r.Batches.verdict(
		fmt.Sprintf("fan-out of %d×%s answered in ≤ %s (median of %d)", r.Calls, formatDuration(r.Ideal), formatDuration(goal), len(r.Walls)),
		goal)
}

// Verdict judges the slow-backend goal: the median batch answered within
// [GoalSlowSlack] of its deadline, every other call answered with its
// result.
func (r SlowResult) Verdict() Verdict {
	goal := r.Timeout + GoalSlowSlack
	return r.Batches.verdict(
		fmt.Sprintf("slow-backend batch answered within %s deadline + %s with every other result present (median of %d)",
			formatDuration(r.Timeout), formatDuration(GoalSlowSlack), len(r.Walls)),
		goal)
}

// Verdicts judges the goals of the jobs scenario: submits per second at
// least [GoalJobSubmits] and a median poll within [GoalJobPollP50]. A phase
// with errors misses its goal whatever its numbers.
func (r JobsResult) Verdicts() []Verdict {
	submit := Verdict{
		Goal: fmt.Sprintf("job submits ≥ %d/s (concurrency %d, %s jobs)", GoalJobSubmits, r.Submit.Concurrency, r.Method),
		Got:  fmt.Sprintf("%.0f/s", r.Submit.Throughput),
		Pass: r.Submit.Throughput >= GoalJobSubmits && r.Submit.Errors == 0 && r.Submit.Requests > 0,
	}
	switch {
	case r.Submit.Errors > 0:
		submit.Margin = fmt.Sprintf("%d errors, first: %v", r.Submit.Errors, r.Submit.FirstError)
	case r.Submit.Requests == 0:
		submit.Margin = "no job was submitted"
	case submit.Pass:
		submit.Margin = fmt.Sprintf("%.0f/s to spare", r.Submit.Throughput-GoalJobSubmits)
	default:
		submit.Margin = fmt.Sprintf("missed by %.0f/s, %.0f%% short", GoalJobSubmits-r.Submit.Throughput,
			100*(GoalJobSubmits-r.Submit.Throughput)/GoalJobSubmits)
	}
	poll := Verdict{
		Goal: fmt.Sprintf("job poll p50 ≤ %s (rpc.jobs.get, concurrency %d)", formatDuration(GoalJobPollP50), r.Poll.Concurrency),
		Got:  formatDuration(r.Poll.P50),
		Pass: r.Poll.P50 <= GoalJobPollP50 && r.Poll.Errors == 0 && r.Poll.Requests > 0,
	}
	switch {
	case r.Poll.Errors > 0:
		poll.Margin = fmt.Sprintf("%d errors, first: %v", r.Poll.Errors, r.Poll.FirstError)
	case r.Poll.Requests == 0:
		poll.Margin = "no poll was answered"
	case poll.Pass:
		poll.Margin = formatDuration(GoalJobPollP50-r.Poll.P50) + " to spare"
	default:
		poll.Margin = "missed by " + formatDuration(r.Poll.P50-GoalJobPollP50)
	}
	return []Verdict{submit, poll}
}

func (b Batches) verdict(goalText string, goal time.Duration) Verdict {
	v := Verdict{Goal: goalText, Got: formatDuration(b.Median)}
	switch {
	case len(b.Walls) == 0:
		v.Got = "no answer"
		v.Margin = "no batch was answered"
		if len(b.Failures) > 0 {
			v.Margin += ": " + b.Failures[0].Error()
		}
	case len(b.Failures) > 0:
		v.Margin = fmt.Sprintf("%d of %d batches answered wrongly, first: %v", len(b.Failures), len(b.Walls), b.Failures[0])
	case b.Median <= goal:
		v.Pass = true
		v.Margin = formatDuration(goal-b.Median) + " to spare"
	default:
		v.Margin = "missed by " + formatDuration(b.Median-goal)
	}
	return v
}

// ReportCompare writes a table of cs to w: per concurrency, each target's
// throughput, latencies, errors and per-round throughput, then the ratio b/a
// and the added mean latency, and the verdicts of [CompareVerdicts]; last,
// per concurrency, a histogram of both targets' latencies.
func ReportCompare(w io.Writer, cs []Comparison) error {
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "no comparisons")
		return err
	}
	a, b := cs[0].Baseline.Target.Name, cs[0].Subject.Target.Name
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "echo: %s (a) vs %s (b), %d alternating rounds each, req/s the median round\n",
		a, b, len(cs[0].Baseline.Rounds))
	fmt.Fprintln(tw, "concurrency\ttarget\treq/s\tp50\tp90\tp99\tmean\tmax\tok\terrors\trounds req/s")
	for _, c := range cs {
		for _, s := range []Side{c.Baseline, c.Subject} {
			r := s.Result
			rounds := make([]string, len(s.Rounds))
			for i, x := range s.Rounds {
				rounds[i] = strconv.FormatFloat(x, 'f', 0, 64)
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n",
				c.Concurrency, s.Target.Name, r.Throughput,
				formatDuration(r.P50), formatDuration(r.P90), formatDuration(r.P99),
				formatDuration(r.Mean), formatDuration(r.Max), r.Requests, r.Errors, strings.Join(rounds, " "))
		}
		fmt.Fprintf(tw, "%d\tb/a\t%.2f×\t\t\t\t%s\n", c.Concurrency, c.Ratio, signed(c.AddedMean))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeVerdicts(w, CompareVerdicts(cs)...); err != nil {
		return err
	}
	for _, c := range cs {
		title := fmt.Sprintf("echo latency at concurrency %d", c.Concurrency)
		if err := writeChart(w, title, chartSeries{c.Baseline.Target.Name, c.Baseline.Result},
			chartSeries{c.Subject.Target.Name, c.Subject.Result}); err != nil {
			return err
		}
	}
	return nil
}

// ReportFanOut writes the wall times of r's batches and its [FanOutResult.Verdict] to w.
func ReportFanOut(w io.Writer, r FanOutResult) error {
	title := fmt.Sprintf("fan-out: %d sleep calls of %s in one batch, ideal %s", r.Calls, formatDuration(r.Ideal), formatDuration(r.Ideal))
	return writeBatches(w, title, r.Batches, r.Verdict())
}

// ReportSlow writes the wall times of r's batches and its [SlowResult.Verdict] to w.
func ReportSlow(w io.Writer, r SlowResult) error {
	title := fmt.Sprintf("slow backend: one sleep call of %s and %d echo calls, Toolbus-Timeout %s",
		formatDuration(r.Sleep), r.Echoes, formatDuration(r.Timeout))
	return writeBatches(w, title, r.Batches, r.Verdict())
}

// ReportJobs writes the poll and submit measurements of r, how long the
// submitted jobs took to run, and its [JobsResult.Verdicts] to w, then a
// histogram of the latencies of both phases.
func ReportJobs(w io.Writer, r JobsResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "jobs: rpc.jobs.get of one finished job, then rpc.jobs.submit of %s jobs in a closed loop\n", r.Method)
	fmt.Fprintln(tw, "phase\tconcurrency\tops/s\tp50\tp90\tp99\tmean\tmax\tok\terrors")
	for _, p := range []struct {
		name string
		r    Result
	}{{"poll", r.Poll}, {"submit", r.Submit}} {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", p.name, p.r.Concurrency, p.r.Throughput,
			formatDuration(p.r.P50), formatDuration(p.r.P90), formatDuration(p.r.P99),
			formatDuration(p.r.Mean), formatDuration(p.r.Max), p.r.Requests, p.r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.RunRate > 0 {
		fmt.Fprintf(w, "ran: %d jobs submitted (warmup included), the last of each submitter succeeded %s after the last submit: %.0f jobs/s end to end\n",
			r.Jobs, formatDuration(r.Drained), r.RunRate)
	} else if r.Jobs > 0 {
		fmt.Fprintf(w, "ran: %d jobs submitted; not all were seen to succeed\n", r.Jobs)
	}
	if err := writeVerdicts(w, r.Verdicts()...); err != nil {
		return err
	}
	return writeChart(w, "jobs latency", chartSeries{"poll", r.Poll}, chartSeries{"submit", r.Submit})
}

// ReportWebSocket writes a table of r to w: per transport, throughput,
// latencies, errors and per-round throughput, then the ratio WebSocket/HTTP
// and the mean latency WebSocket adds (negative when it saves); then a
// histogram of both transports' latencies.
func ReportWebSocket(w io.Writer, r WebSocketResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "websocket: %d callers of echo sharing one WebSocket connection vs one HTTP client, %d alternating rounds each, req/s the median round\n",
		r.Concurrency, len(r.HTTP.Rounds))
	fmt.Fprintln(tw, "transport\treq/s\tp50\tp90\tp99\tmean\tmax\tok\terrors\trounds req/s")
	for _, s := range []Side{r.HTTP, r.WS} {
		res := s.Result
		rounds := make([]string, len(s.Rounds))
		for i, x := range s.Rounds {
			rounds[i] = strconv.FormatFloat(x, 'f', 0, 64)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Target.Name, res.Throughput,
			formatDuration(res.P50), formatDuration(res.P90), formatDuration(res.P99),
			formatDuration(res.Mean), formatDuration(res.Max), res.Requests, res.Errors, strings.Join(rounds, " "))
	}
	fmt.Fprintf(tw, "WebSocket/HTTP\t%.2f×\t\t\t\t%s\n", r.Ratio, signed(r.AddedMean))
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeChart(w, "websocket latency", chartSeries{r.HTTP.Target.Name, r.HTTP.Result}, chartSeries{r.WS.Target.Name, r.WS.Result})
}

func writeBatches(w io.Writer, title string, b Batches, v Verdict) error {
	walls := make([]string, len(b.Walls))
	for i, d := range b.Walls {
		walls[i] = formatDuration(d)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, title)
	fmt.Fprintln(tw, "batches\tmin\tmedian\tmax\tfailed\teach")
	fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", len(b.Walls), formatDuration(b.Min), formatDuration(b.Median),
		formatDuration(b.Max), len(b.Failures), strings.Join(walls, " "))
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeVerdicts(w, v)
}

func writeVerdicts(w io.Writer, vs ...Verdict) error {
	for _, v := range vs {
		if _, err := fmt.Fprintln(w, v); err != nil {
			return err
		}
	}
	return nil
}

// formatDuration rounds d to three or four significant digits: a report
// needs 52.3µs, not 52.345678µs.
func formatDuration(d time.Duration) string {
	a := max(d, -d)
	var unit time.Duration
	switch {
	case a >= 10*time.Second:
		unit = 10 * time.Millisecond
	case a >= time.Second:
		unit = time.Millisecond
	case a >= 100*time.Millisecond:
		unit = 100 * time.Microsecond
	case a >= 10*time.Millisecond:
		unit = 10 * time.Microsecond
	case a >= time.Millisecond:
		unit = time.Microsecond
	case a >= 100*time.Microsecond:
		unit = 100 * time.Nanosecond
	case a >= 10*time.Microsecond:
		unit = 10 * time.Nanosecond
	default:
		unit = time.Nanosecond
	}
	return d.Round(unit).String()
}

func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + formatDuration(d)
	}
	return formatDuration(d)
}
