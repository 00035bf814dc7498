package worker

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/callstats"
)

// Status is a snapshot of a runtime, as [Runtime.Status] reports it; its
// JSON is what a worker's status endpoint answers.
type Status struct {
	// ID names the worker; it is the id of its discovery announcements.
	ID string `json:"id"`
	// Host is the host name; empty when it could not be read.
	Host string `json:"host,omitempty"`
	// Started is when the runtime was made; Now when the snapshot was.
	Started       time.Time `json:"started"`
	Now           time.Time `json:"now"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Ready tells whether the runtime serves calls now; NotReady says why
	// not (see [Runtime.Ready]).
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	// InFlight counts the calls over the bus the runtime holds now.
	InFlight int64 `json:"in_flight"`
	// WindowSeconds is the span of the rates and percentiles.
	WindowSeconds int `json:"window_seconds"`
	// Methods holds one row per registered name or pattern, sorted.
	Methods []MethodStatus `json:"methods"`
	// RecentErrors holds the newest error answers, newest first.
	RecentErrors []ErrorAnswer `json:"recent_errors"`
}

// MethodStatus is one registered name or pattern in a [Status]: what
// every toolbus process reports of a method ([bus.MethodStatus], whose
// Method is here the name or pattern the handler was registered under and
// whose latencies are handler times), and the worker's own slots. Its
// counts cover the calls of every method the pattern serves, over the bus
// and through [Runtime.Invoke].
type MethodStatus struct {
	bus.MethodStatus
	// Concurrency is how many calls over the bus may run at once; Busy
	// how many of those slots are taken now.
	Concurrency int `json:"concurrency"`
	Busy        int `json:"busy"`
	// TotalErrors counts the error answers since the runtime was made.
	TotalErrors int64 `json:"total_errors"`
}

// ErrorAnswer is one call answered with an error, in [Status.RecentErrors].
type ErrorAnswer struct {
	Time time.Time `json:"time"`
	// ID is the JSON-RPC id as sent, e.g. `7` or `"a"`; empty for a
	// notification.
	ID string `json:"id"`
	// Method is the method called, not the pattern that served it.
	Method  string `json:"method"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	// TraceID is the call's trace id in hex, when it was traced.
	TraceID string `json:"trace_id,omitempty"`
}

// Ready reports whether the runtime serves calls now: nil when it has
// started, is not shutting down, its connection is up and every
// subscription is active. Otherwise the error says why and matches, with
// errors.Is, [ErrNotStarted], [ErrDraining] (shutdown has begun),
// [ErrClosed] (shutdown is over) or [ErrDisconnected]. It suits a
// readiness probe: a worker that is not ready gets no calls.
func (rt *Runtime) Ready() error {
	rt.mu.Lock()
	started, closed := rt.started, rt.closed
	dead := ""
	for _, r := range rt.routes {
		if r.sub == nil || !r.sub.IsValid() {
			dead = r.subject
			break
		}
	}
	cancels := rt.cancelSub != nil && rt.cancelSub.IsValid()
	rt.mu.Unlock()
	switch {
	case closed && rt.ctx.Err() != nil:
		return ErrClosed
	case closed:
		return ErrDraining
	case !started:
		return ErrNotStarted
	case !rt.nc.IsConnected():
		return fmt.Errorf("%w: %s", ErrDisconnected, rt.nc.Status())
	case dead != "":
		return fmt.Errorf("worker: subscription to %s is closed", dead)
	case !cancels:
		return fmt.Errorf("worker: subscription to %s is closed", rt.cfg.subjects.Cancel())
	}
	return nil
}

// Status returns a snapshot of the runtime: who it is, whether it is ready,
// and per registered pattern the calls of the last [callstats.Window], with
// the newest error answers.
func (rt *Runtime) Status() Status {
	now := time.Now()
	st := Status{
		ID:            rt.id,
		Host:          rt.host,
		Started:       rt.stats.Started(),
		Now:           now,
		UptimeSeconds: now.Sub(rt.stats.Started()).Seconds(),
		Ready:         true,
		InFlight:      rt.inflight.Load(),
		WindowSeconds: int(callstats.Window / time.Second),
		Methods:       []MethodStatus{},
		RecentErrors:  []ErrorAnswer{},
	}
	if err := rt.Ready(); err != nil {
		st.Ready, st.NotReady = false, err.Error()
	}

	stats := map[string]callstats.Stats{}
	for _, s := range rt.stats.Snapshot() {
		stats[s.Method] = s
	}
	rt.mu.Lock()
	for _, r := range rt.routes {
		row := methodStatus(r.pattern, stats[r.pattern])
		row.Concurrency, row.Busy = cap(r.sem), len(r.sem)
		st.Methods = append(st.Methods, row)
		delete(stats, r.pattern)
	}
	rt.mu.Unlock()
	// What is left was counted under callstats.Other, past its cap on
	// patterns.
	for name, s := range stats {
		st.Methods = append(st.Methods, methodStatus(name, s))
	}
	slices.SortFunc(st.Methods, func(a, b MethodStatus) int { return cmp.Compare(a.Method, b.Method) })

	for _, e := range rt.stats.RecentErrors() {
		st.RecentErrors = append(st.RecentErrors, ErrorAnswer{Time: e.Time, ID: e.ID, Method: e.Method,
			Code: e.Code, Message: e.Message, TraceID: e.TraceID})
	}
	return st
}

func methodStatus(name string, s callstats.Stats) MethodStatus {
	s.Method = name // a pattern without calls has no statistics yet
	return MethodStatus{MethodStatus: s.MethodStatus(), TotalErrors: s.TotalErrors}
}

// Summary is s as every toolbus process reports itself on its status
// endpoint ([bus.ServeStatus]): kind worker, with the readiness under
// Extra's "ready" and "not_ready".
func (s Status) Summary() bus.Status {
	out := bus.Status{Kind: bus.KindWorker, ID: s.ID, Host: s.Host, Started: s.Started, InFlight: s.InFlight,
		Methods: make([]bus.MethodStatus, 0, len(s.Methods)),
		Extra:   map[string]any{"ready": s.Ready}}
	if s.NotReady != "" {
		out.Extra["not_ready"] = s.NotReady
	}
	for _, m := range s.Methods {
		out.Methods = append(out.Methods, m.MethodStatus)
	}
	return out
}
