package dashboard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// gatherTTL is how long one gathering of the cluster's statuses answers
// the dashboard: the trends move in steps of ten seconds, and every open
// page polls every two, so without it each poll of each page would ask
// every process of the cluster.
const gatherTTL = 5 * time.Second

// gatherTimeout bounds one gathering.
const gatherTimeout = 3 * time.Second

// ScopeCluster is the scope of trends summed over every ingress.
const ScopeCluster = "cluster"

// gathered caches the last gathering of the cluster's statuses.
type gathered struct {
	mu   sync.Mutex // held while gathering, so that one request gathers for all
	at   time.Time
	list []bus.Status
	err  error
}

// statuses returns the cluster's statuses, gathering them again when the
// last gathering is older than [gatherTTL].
func (d *Dashboard) statuses(ctx context.Context) ([]bus.Status, error) {
	if d.src.Gather == nil {
		return nil, nil
	}
	g := &d.gathered
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && time.Since(g.at) < gatherTTL {
		return g.list, g.err
	}
	gctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	g.list, g.err = d.src.Gather(gctx)
	g.at = time.Now()
	return g.list, g.err
}

// replicaTrends returns the trends of every ingress replica by id, this
// one's read now rather than from the gathering.
func replicaTrends(list []bus.Status, selfID string, self bus.Trends) map[string]*bus.Trends {
	out := map[string]*bus.Trends{selfID: &self}
	for i := range list {
		st := &list[i]
		if st.Kind == bus.KindIngress && st.Trends != nil && st.ID != selfID {
			out[st.ID] = st.Trends
		}
	}
	return out
}

// mergeTrends sums the trends of several replicas onto the steps of the
// newest: calls, errors and in-flight peaks add up (the sum of peaks is an
// upper bound of the cluster's peak); a 99th percentile is the largest of
// the replicas' (an upper bound too: percentiles do not add); the jobs
// queue, which every replica sees whole, is its largest reading.
func mergeTrends(list []*bus.Trends) bus.Trends {
	var base *bus.Trends
	for _, t := range list {
		if base == nil || t.Start.After(base.Start) {
			base = t
		}
	}
	if base == nil {
		return bus.Trends{}
	}
	n := len(base.InFlight)
	step := time.Duration(base.StepSeconds) * time.Second
	out := bus.Trends{Start: base.Start, StepSeconds: base.StepSeconds, InFlight: make([]int64, n)}
	methods := map[string]*bus.MethodTrend{}
	for _, t := range list {
		if t.StepSeconds != base.StepSeconds || step <= 0 {
			continue
		}
		off := int(t.Start.Sub(base.Start) / step) // <= 0
		at := func(i int) (int, bool) { j := i + off; return j, j >= 0 && j < n }
		for i, v := range t.InFlight {
			if j, ok := at(i); ok && v > 0 {
				out.InFlight[j] += v
			}
		}
		if t.JobsQueued != nil {
			if out.JobsQueued == nil {
				out.JobsQueued = make([]int64, n)
				for i := range out.JobsQueued {
					out.JobsQueued[i] = -1
				}
			}
			for i, v := range t.JobsQueued {
				if j, ok := at(i); ok {
					out.JobsQueued[j] = max(out.JobsQueued[j], v)
				}
			}
		}
		for _, m := range t.Methods {
			mt := methods[m.Method]
			if mt == nil {
				mt = &bus.MethodTrend{Method: m.Method, Calls: make([]int64, n), ToolErrors: make([]int64, n),
					CallerErrors: make([]int64, n), InfraErrors: make([]int64, n), P99Ms: make([]float64, n)}
				methods[m.Method] = mt
			}
			for i := range m.Calls {
				j, ok := at(i)
				if !ok {
					continue
				}
				mt.Calls[j] += m.Calls[i]
				mt.ToolErrors[j] += at64(m.ToolErrors, i)
				mt.CallerErrors[j] += at64(m.CallerErrors, i)
				mt.InfraErrors[j] += at64(m.InfraErrors, i)
				if i < len(m.P99Ms) {
					mt.P99Ms[j] = max(mt.P99Ms[j], m.P99Ms[i])
				}
			}
		}
	}
	for _, mt := range methods {
		out.Methods = append(out.Methods, *mt)
	}
	slices.SortFunc(out.Methods, func(a, b bus.MethodTrend) int { return strings.Compare(a.Method, b.Method) })
	return out
}

// at64 is v[i], or 0 past its end: a status answer from another process
// is read, not trusted to be well formed.
func at64(v []int64, i int) int64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}
