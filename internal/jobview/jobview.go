// Package jobview turns the jobs service's statistics into the jobs part of
// the ingress's dashboard, for the programs that wire the two together.
package jobview

import (
	"context"

	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// Func returns what [github.com/toolbus/toolbus/ingress.WithJobStats] takes, reading svc: every
// caller's jobs, or the asking caller's alone.
func Func(svc *jobs.Service) func(ctx context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error) {
	return func(ctx context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error) {
		var st jobs.Stats
		var err error
		if q.All {
			st, err = svc.Stats(ctx, q.Recent)
		} else {
			st, err = svc.CallerStats(ctx, q.Caller, q.Recent)
		}
		if err != nil {
			return dashboard.JobsState{}, err
		}
		return Convert(st), nil
	}
}

// Convert turns jobs statistics into the dashboard's form.
func Convert(st jobs.Stats) dashboard.JobsState {
	out := dashboard.JobsState{ByState: make(map[string]int, len(st.ByState)), Truncated: st.Truncated,
		Recent: make([]dashboard.JobState, 0, len(st.Recent))}
	for state, n := range st.ByState {
		out.ByState[string(state)] = n
	}
	for _, r := range st.Recent {
		j := dashboard.JobState{ID: r.ID, Method: r.Method, State: string(r.State), Created: r.CreatedAt}
		if r.Progress != nil {
			p := r.Progress.Percent
			j.Percent = &p
			j.Message = r.Progress.Message
		}
		if r.Error != nil {
			j.Error = &dashboard.JobError{Code: r.Error.Code, Message: r.Error.Message}
		}
		if r.State == schema.JobSucceeded {
			full := 100.0
			j.Percent = &full
		}
		out.Recent = append(out.Recent, j)
	}
	return out
}
