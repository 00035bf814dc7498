package dashboard

import (
	"slices"

	"github.com/toolbus/toolbus/bus"
)

// Chart sizes, in the page's pixels: a method's sparklines and the
// cluster's two charts.
const (
	sparkW, sparkH     = 120, 20
	clusterW, clusterH = 300, 40
)

// live is what the page shows elsewhere as it is now, which the trends'
// figures of now must agree with.
type live struct {
	inFlight int64 // this replica's calls in flight
	queued   int64 // the jobs queue's depth as the jobs section read it; -1 when not read
}

// trends draws the trends of the cluster, or of the replica named (when
// it is known), as v may see them: the methods it may call and, for an
// operator, the calls in flight and the jobs queue, which count every
// caller's. The newest point of the jobs queue is now's reading, the
// count the jobs section shows, rather than the peak of the step under
// way; the calls in flight now are this replica's as counted now and
// the others' as their status answers said.
func (d *Dashboard) trends(list []bus.Status, v View, replica string, now live) *TrendsState {
	by := replicaTrends(list, d.src.ID, d.src.Stats.Trends(0))
	var t bus.Trends
	scope := ScopeCluster
	if r, ok := by[replica]; ok {
		t, scope = *r, replica
	} else {
		all := make([]*bus.Trends, 0, len(by))
		for _, r := range by {
			all = append(all, r)
		}
		t = mergeTrends(all)
	}
	n := len(t.InFlight)
	out := &TrendsState{Scope: scope, Start: t.Start, StepSeconds: t.StepSeconds, Points: n, Methods: []MethodTrendState{}}
	if n == 0 || t.StepSeconds <= 0 {
		return out
	}
	if v.AllCallers {
		out.InFlight = inFlightNow(list, d.src.ID, scope, now.inFlight)
		for _, x := range t.InFlight {
			out.InFlightPeak = max(out.InFlightPeak, x)
		}
		out.InFlightSVG = chart(clusterW, clusterH, 4, series{"inflight", floats(t.InFlight, 1)})
		jobs := t.JobsQueued
		if now.queued >= 0 {
			if len(jobs) != n {
				jobs = make([]int64, n)
				for i := range jobs {
					jobs[i] = -1 // not read then
				}
			} else {
				jobs = slices.Clone(jobs)
			}
			jobs[n-1] = now.queued
		}
		out.JobsQueued = -1
		if len(jobs) == n {
			out.JobsQueued = jobs[n-1]
			out.JobsSVG = chart(clusterW, clusterH, 4, series{"jobs", floats(jobs, 1)})
		}
	}
	step := float64(t.StepSeconds)
	for _, m := range t.Methods {
		if !v.shows(m.Method) || len(m.Calls) != n {
			continue
		}
		ms := MethodTrendState{Method: m.Method}
		rate := floats(m.Calls, step)
		tool, infra := make([]float64, n), make([]float64, n)
		p99 := make([]float64, n)
		for i, c := range m.Calls {
			ms.Calls += c
			ms.ToolErrors += at64(m.ToolErrors, i)
			ms.CallerErrors += at64(m.CallerErrors, i)
			ms.InfraErrors += at64(m.InfraErrors, i)
			ms.PeakRate = max(ms.PeakRate, rate[i])
			if c == 0 {
				// No call, no rate of errors nor latency: a gap.
				tool[i], infra[i], p99[i] = -1, -1, -1
				continue
			}
			tool[i] = float64(at64(m.ToolErrors, i)) / float64(c)
			infra[i] = float64(at64(m.InfraErrors, i)) / float64(c)
			if i < len(m.P99Ms) {
				p99[i] = m.P99Ms[i]
				ms.PeakP99Ms = max(ms.PeakP99Ms, p99[i])
			}
		}
		ms.RateSVG = chart(sparkW, sparkH, 0, series{"rate", rate})
		// Error shares on one scale from 0 to 100%, so that a glance
		// compares methods.
		ms.ErrorsSVG = chart(sparkW, sparkH, 1, series{"tool", tool}, series{"infra", infra})
		ms.P99SVG = chart(sparkW, sparkH, 0, series{"p99", p99})
		out.Methods = append(out.Methods, ms)
	}
	return out
}

// inFlightNow is the calls in flight now in scope: this replica's count
// self, the others' as their status answers in list said, summed over
// every ingress for [ScopeCluster].
func inFlightNow(list []bus.Status, selfID, scope string, self int64) int64 {
	if scope == selfID {
		return self
	}
	n := int64(0)
	if scope == ScopeCluster {
		n = self
	}
	for _, s := range list {
		if s.Kind == bus.KindIngress && s.ID != selfID && (scope == ScopeCluster || scope == s.ID) {
			n += s.InFlight
		}
	}
	return n
}
