package ingress

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/schema"
)

// ui holds the dashboard's page, embedded so that the binary serves it
// with no files beside it and no build step.
//
//go:embed ui
var ui embed.FS

// dashboardRecentJobs is how many jobs the dashboard lists.
const dashboardRecentJobs = 20

// jobStatsTimeout bounds reading the jobs for one dashboard answer.
const jobStatsTimeout = 2 * time.Second

// WithDashboard turns the dashboard at /ui/ on or off (default on). The
// page and its files are served without credentials, since they hold no
// data; GET /ui/api/state, which does, needs them like every other route
// when [WithAuth] is on (the page asks for an API key then), and shows a
// caller what is its own (see [DashboardState]).
func WithDashboard(on bool) Option {
	return func(c *config) error {
		c.noDashboard = !on
		return nil
	}
}

// JobsQuery says which jobs the dashboard's jobs section shows.
type JobsQuery struct {
	// Caller is who asks: its jobs alone are counted and listed unless All
	// is set. Empty when the ingress runs without [WithAuth].
	Caller string
	// All asks for every caller's jobs: an operator's view, or that of
	// the one anonymous caller of an ingress without authentication.
	All bool
	// Recent is how many of the newest jobs to list.
	Recent int
}

// WithJobStats gives the dashboard its jobs section: stats reads the
// counts by state and the newest q.Recent jobs, of q.Caller alone unless
// q.All is set.
func WithJobStats(stats func(ctx context.Context, q JobsQuery) (JobsState, error)) Option {
	return func(c *config) error {
		if stats == nil {
			return errors.New("ingress: nil job stats")
		}
		c.jobStats = stats
		return nil
	}
}

// WithID names this ingress replica in its dashboard and status answers
// (default: a random id made at [New]).
func WithID(id string) Option {
	return func(c *config) error {
		if id == "" {
			return errors.New("ingress: empty id")
		}
		c.id = id
		return nil
	}
}

// setupDashboard adds the routes of the dashboard.
func (s *Server) setupDashboard() {
	if s.cfg.noDashboard {
		return
	}
	files, err := fs.Sub(ui, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	s.mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(files)))
	s.mux.HandleFunc("GET /ui/api/state", s.serveDashboardState)
	s.mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
}

// uiOpen reports whether path is one of the dashboard's static files,
// which need no credentials.
func uiOpen(path string) bool {
	return path == "/ui" || (len(path) >= 4 && path[:4] == "/ui/" && path != "/ui/api/state")
}

func (s *Server) serveDashboardState(w http.ResponseWriter, r *http.Request) {
	st := s.dashboard(r.Context(), s.auth.requestView(r.Context()))
	b, err := json.Marshal(st)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "dashboard state", slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// Dashboard returns what the dashboard shows an operator now (see
// [DashboardState]): every caller's data. It reads the jobs within a bound
// of its own (2s).
func (s *Server) Dashboard(ctx context.Context) DashboardState {
	return s.dashboard(ctx, view{open: true})
}

// dashboard returns what the dashboard shows v.
func (s *Server) dashboard(ctx context.Context, v view) DashboardState {
	st := s.overview(v)
	if s.cfg.jobStats != nil {
		jctx, cancel := context.WithTimeout(ctx, jobStatsTimeout)
		js, err := s.cfg.jobStats(jctx, JobsQuery{Caller: v.caller, All: v.allCallers(), Recent: dashboardRecentJobs})
		cancel()
		if err != nil {
			js = JobsState{Error: err.Error()}
		}
		st.Jobs = &js
	}
	return st
}

// Overview is [Server.Dashboard] without the jobs, which cost reads of the
// job store: only what the ingress holds in memory.
func (s *Server) Overview() DashboardState { return s.overview(view{open: true}) }

// overview is what the ingress holds in memory that v may see: the rows
// and workers' methods of the methods it may call, and its own errors;
// everything for a view of all callers.
func (s *Server) overview(v view) DashboardState {
	now := time.Now()
	var st DashboardState
	st.Now = now
	st.Caller, st.AllCallers = v.caller, v.allCallers()
	st.WindowSeconds = int(windowSeconds)
	st.Ingress.ID = s.id
	st.Ingress.Started = s.stats.Started()
	st.Ingress.UptimeSeconds = now.Sub(s.stats.Started()).Seconds()
	st.Ingress.InFlight = s.inFlight.Load()

	var workers map[string]int
	if reg := s.cfg.registry; reg != nil {
		st.Discovery = true
		workers = map[string]int{}
		for _, t := range reg.Catalog().Tools {
			workers[t.Name] = t.Workers
		}
		for _, w := range reg.Workers() {
			st.Workers = append(st.Workers, WorkerState{ID: w.ID, Methods: w.Methods, Expires: w.Expires})
		}
	}
	shows := func(method string) bool { return v.allCallers() || v.mayCall(method) }
	seen := map[string]bool{}
	for _, m := range s.stats.Snapshot() {
		if !shows(m.Method) {
			continue
		}
		ms := MethodState{
			Method: m.Method, Rate: m.Rate, Calls: m.Calls, Errors: m.Errors, ErrorRate: m.ErrorRate(),
			P50Ms: callstats.Millis(m.P50), P99Ms: callstats.Millis(m.P99), InFlight: m.InFlight, Total: m.Total,
		}
		if reg := s.cfg.registry; reg != nil && !strings.HasPrefix(m.Method, "_") && !schema.IsReserved(m.Method) {
			// The workers of the name or pattern that serves it, 0
			// when none does now; the ingress's rpc.* methods and the
			// grouped labels have none.
			n := 0
			if t, ok := reg.Lookup(m.Method); ok {
				n = t.Workers
			}
			ms.Workers = &n
		}
		seen[m.Method] = true
		st.Methods = append(st.Methods, ms)
	}
	for name, n := range workers {
		if !seen[name] && shows(name) {
			n := n
			st.Methods = append(st.Methods, MethodState{Method: name, Workers: &n})
		}
	}
	sortMethods(st.Methods)
	if !v.allCallers() {
		// The ingress's count covers every caller's calls; a caller sees
		// the sum of the rows it is shown.
		st.Ingress.InFlight = 0
		for _, m := range st.Methods {
			st.Ingress.InFlight += m.InFlight
		}
		st.Workers = visibleWorkers(st.Workers, shows)
	}
	for _, e := range s.stats.RecentErrors() {
		if !v.allCallers() && e.Caller != v.caller {
			continue
		}
		st.RecentErrors = append(st.RecentErrors, ErrorState{
			Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code, Message: e.Message, TraceID: e.TraceID,
		})
	}
	if st.Methods == nil {
		st.Methods = []MethodState{}
	}
	if st.Workers == nil {
		st.Workers = []WorkerState{}
	}
	if st.RecentErrors == nil {
		st.RecentErrors = []ErrorState{}
	}
	return st
}

// visibleWorkers returns the workers with the methods that shows keeps,
// leaving out those with none left.
func visibleWorkers(workers []WorkerState, shows func(method string) bool) []WorkerState {
	out := workers[:0]
	for _, w := range workers {
		var methods []string
		for _, m := range w.Methods {
			if shows(m) {
				methods = append(methods, m)
			}
		}
		if len(methods) > 0 {
			w.Methods = methods
			out = append(out, w)
		}
	}
	return out
}
