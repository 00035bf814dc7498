package dashboard

import (
	"github.com/toolbus/toolbus/bus"
)

// Chart sizes, in the page's pixels: a method's sparklines and the
// cluster's two charts.
const (
	sparkW, sparkH     = 120, 22
	clusterW, clusterH = 300, 48
)

// trends draws the trends of the cluster, or of the replica named (when
// it is known), as v may see them: the methods it may call and, for an
// operator, the calls in flight and the jobs queue, which count every
// caller's.
func (d *Dashboard) trends(list []bus.Status, v View, replica string) *TrendsState {
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
		out.InFlight = t.InFlight[n-1]
		for _, x := range t.InFlight {
			out.InFlightPeak = max(out.InFlightPeak, x)
		}
		out.InFlightSVG = chart(clusterW, clusterH, 4, series{"inflight", floats(t.InFlight, 1)})
		if len(t.JobsQueued) == n {
			out.JobsQueued = t.JobsQueued[n-1]
			out.JobsSVG = chart(clusterW, clusterH, 4, series{"jobs", floats(t.JobsQueued, 1)})
		} else {
			out.JobsQueued = -1
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
