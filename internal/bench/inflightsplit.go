package bench

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// GoalInFlightSplitPerCall is the most, in bytes, that the resident memory
// of one ingress of a split deployment may grow for each call in flight
// through it: 4 KB, 40 MB for the scenario's 10,000 calls.
const GoalInFlightSplitPerCall = 4_000

// InFlightSplitResult is one round of the in-flight scenario sent through
// one ingress of a split deployment, as [RunInFlightSplit] measures it.
type InFlightSplitResult struct {
	// Round is the round, from 1, in which Binary ran.
	Round int
	// Binary is the toolbus program the deployment's three processes ran.
	Binary string
	// InFlight is the scenario measured at the ingress: its RSSBefore and
	// RSSPeak are Ingress's.
	InFlight InFlightResult
	// Ingress, Worker and NATS are the resident memory of the
	// deployment's three processes, read together.
	Ingress, Worker, NATS Resident
}

// Resident is the resident memory of process Pid, in bytes: before a
// scenario sent its calls, and the most read until the last answer.
type Resident struct {
	Pid          int
	Before, Peak uint64
}

// Growth is how much the peak exceeds the memory before; 0 when it does
// not.
func (m Resident) Growth() uint64 {
	if m.Peak < m.Before {
		return 0
	}
	return m.Peak - m.Before
}

// calls is the number of calls in flight at once.
func (r InFlightSplitResult) calls() int { return r.InFlight.Batches * r.InFlight.Calls }

// perCall is the ingress's growth per call in flight, in bytes.
func (r InFlightSplitResult) perCall() float64 {
	return float64(r.Ingress.Growth()) / float64(max(r.calls(), 1))
}

// Verdicts judges the two goals of the calls in flight through one
// ingress: its resident memory grows by at most [GoalInFlightSplitPerCall]
// a call, and every batch is answered rightly within [GoalInFlightSlack]
// of the sleep.
func (r InFlightSplitResult) Verdicts() []Verdict {
	n := r.calls()
	goal := uint64(n) * GoalInFlightSplitPerCall
	growth := r.Ingress.Growth()
	mem := Verdict{
		Goal: fmt.Sprintf("%d calls in flight through one ingress of a split deployment: its resident memory grows ≤ %s MB (%g KB a call)",
			n, strconv.FormatFloat(float64(goal)/1e6, 'g', -1, 64), GoalInFlightSplitPerCall/1e3),
		Got:  fmt.Sprintf("+%s, %.2f KB a call", megabytes(growth), r.perCall()/1e3),
		Pass: growth <= goal,
	}
	if mem.Pass {
		mem.Margin = megabytes(goal-growth) + " to spare"
	} else {
		mem.Margin = "missed by " + megabytes(growth-goal)
	}
	return []Verdict{mem, r.InFlight.wallVerdict()}
}

// megabytes formats b bytes in MB of 10⁶ bytes, to a tenth.
func megabytes(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// span formats m as "before → peak MB".
func (m Resident) span() string {
	return fmt.Sprintf("%.1f → %s", float64(m.Before)/1e6, megabytes(m.Peak))
}

// ReportInFlightSplit writes one round: the program, the resident memory
// of the ingress (before, peak, growth and growth per call), the time to
// the last answer, the memory of the worker and of the NATS server, each
// with its pid, and the [InFlightSplitResult.Verdicts].
func ReportInFlightSplit(w io.Writer, r InFlightSplitResult) error {
	in := r.InFlight
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "round %d, %s: %d batches of %d sleep calls of %s at once\n", r.Round, r.Binary, in.Batches, in.Calls, formatDuration(in.Sleep))
	fmt.Fprintf(tw, "  ingress RSS (pid %d)\t%s (+%s, %.2f KB a call)\n", r.Ingress.Pid, r.Ingress.span(), megabytes(r.Ingress.Growth()), r.perCall()/1e3)
	fmt.Fprintf(tw, "  answered in\t%s (%s after the sleep)\n", formatDuration(in.Wall), formatDuration(in.Wall-in.Sleep))
	fmt.Fprintf(tw, "  worker RSS (pid %d)\t%s (+%s)\n", r.Worker.Pid, r.Worker.span(), megabytes(r.Worker.Growth()))
	fmt.Fprintf(tw, "  NATS RSS (pid %d)\t%s (+%s)\n", r.NATS.Pid, r.NATS.span(), megabytes(r.NATS.Growth()))
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeVerdicts(w, r.Verdicts()...)
}

// ReportInFlightSplitRuns writes rounds side by side in the order they
// ran, one row each, with PASS or MISS for each goal: the memory and the
// time to the last answer.
func ReportInFlightSplitRuns(w io.Writer, rounds []InFlightSplitResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tprogram\tingress RSS\tper call\tanswered in\tworker RSS\tNATS RSS\tmemory\tanswered")
	for _, r := range rounds {
		vs := r.Verdicts()
		fmt.Fprintf(tw, "%d\t%s\t%s (+%.1f)\t%.2f KB\t%s\t%s\t%s\t%s\t%s\n", r.Round, r.Binary,
			r.Ingress.span(), float64(r.Ingress.Growth())/1e6, r.perCall()/1e3, formatDuration(r.InFlight.Wall),
			r.Worker.span(), r.NATS.span(), vs[0].Word(), vs[1].Word())
	}
	return tw.Flush()
}
