package node

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// lazyJobs serves the rpc.jobs.* methods through a jobs service once its
// stream and bucket are open, and refuses them -32003 (retryable, naming
// what it waits for) until then.
type lazyJobs struct {
	svc  atomic.Pointer[jobs.Service]
	st   *bus.Startup
	part string
}

var (
	_ ingress.Extension = (*lazyJobs)(nil)
	_ ingress.Promoter  = (*lazyJobs)(nil)
)

func (l *lazyJobs) unavailable() *schema.Error {
	msg := "jobs are not available yet; send the call again shortly"
	if r := l.st.Reason(l.part); r != "" {
		msg = "jobs are not available yet (" + r + "); send the call again shortly"
	}
	return schema.NewError(schema.CodeUnavailable, msg, map[string]any{
		"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonJobsNotReady})
}

func (l *lazyJobs) ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.ServeRPC(ctx, call)
	}
	return nil, l.unavailable()
}

func (l *lazyJobs) Promotable(ctx context.Context, method string) bool {
	svc := l.svc.Load()
	return svc != nil && svc.Promotable(ctx, method)
}

func (l *lazyJobs) RunAsJob(ctx context.Context, call schema.Call, timeout time.Duration) (json.RawMessage, *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.RunAsJob(ctx, call, timeout)
	}
	return nil, l.unavailable()
}

func (l *lazyJobs) Subscribe(ctx context.Context, call schema.Call) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.Subscribe(ctx, call)
	}
	return nil, nil, l.unavailable()
}

func (l *lazyJobs) HoldSubscription(caller string) (func(), *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.HoldSubscription(caller)
	}
	return nil, l.unavailable()
}

func (l *lazyJobs) SubscribeHeld(ctx context.Context, call schema.Call, release func()) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.SubscribeHeld(ctx, call, release)
	}
	release()
	return nil, nil, l.unavailable()
}

// stats is the dashboard's view of the jobs ([ingress.WithJobStats]).
func (l *lazyJobs) stats(ctx context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error) {
	svc := l.svc.Load()
	if svc == nil {
		return dashboard.JobsState{}, l.unavailable()
	}
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
	return jobsView(st), nil
}

// jobsView turns jobs statistics into the dashboard's form.
func jobsView(st jobs.Stats) dashboard.JobsState {
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
