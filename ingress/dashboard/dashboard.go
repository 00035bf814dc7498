package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/schema"
)

// ui holds the dashboard's page, embedded so that the binary serves it
// with no files beside it and no build step.
//
//go:embed ui
var ui embed.FS

// RecentJobs is how many jobs the dashboard lists.
const RecentJobs = 20

// jobStatsTimeout bounds reading the jobs for one dashboard answer.
const jobStatsTimeout = 2 * time.Second

// JobsQuery says which jobs the dashboard's jobs section shows.
type JobsQuery struct {
	// Caller is who asks: its jobs alone are counted and listed unless All
	// is set. Empty when the ingress runs without authentication.
	Caller string
	// All asks for every caller's jobs: an operator's view, or that of
	// the one anonymous caller of an ingress without authentication.
	All bool
	// Recent is how many of the newest jobs to list.
	Recent int
}

// View is what one caller may see of the dashboard. The zero View sees no
// method and no other caller's data.
type View struct {
	// Caller is whose view it is; empty without authentication.
	Caller string
	// AllCallers shows every caller's data: the rows of every method,
	// every caller's errors and jobs.
	AllCallers bool
	// MayCall reports whether the caller may call every method that name
	// matches; the rows of those methods are shown. Nil allows none.
	MayCall func(name string) bool
}

// Everything is the View of an operator, or of the one anonymous caller
// of an ingress without authentication.
func Everything() View { return View{AllCallers: true} }

// shows reports whether v sees the row of method.
func (v View) shows(method string) bool {
	return v.AllCallers || (v.MayCall != nil && v.MayCall(method))
}

// Source is what the dashboard reads of one ingress replica.
type Source struct {
	// ID names the replica.
	ID string
	// Stats holds the replica's per-method statistics and recent errors.
	Stats *callstats.Set
	// InFlight returns how many calls the replica is waiting on now.
	InFlight func() int64
	// Registry, when not nil, gives the live workers and their methods.
	Registry *discovery.Registry
	// Jobs, when not nil, reads the jobs section: the counts by state and
	// the newest q.Recent jobs, of q.Caller alone unless q.All is set.
	Jobs func(ctx context.Context, q JobsQuery) (JobsState, error)
}

// Dashboard answers what the page at /ui/ shows. Make one with [New]; its
// methods are safe for concurrent use.
type Dashboard struct {
	src Source
}

// New returns the dashboard of src; src.Stats and src.InFlight are
// required.
func New(src Source) *Dashboard { return &Dashboard{src: src} }

// Open reports whether path is one of the dashboard's static files, which
// hold no data and need no credentials.
func Open(path string) bool {
	return path == "/ui" || (strings.HasPrefix(path, "/ui/") && path != "/ui/api/state")
}

// Handler serves the page under /ui/ and its data at GET /ui/api/state,
// as view says the request's caller may see it; GET /ui redirects to the
// page.
func (d *Dashboard) Handler(view func(r *http.Request) View, log *slog.Logger) http.Handler {
	files, err := fs.Sub(ui, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(files)))
	mux.HandleFunc("GET /ui/api/state", func(w http.ResponseWriter, r *http.Request) {
		b, err := json.Marshal(d.State(r.Context(), view(r)))
		if err != nil {
			log.LogAttrs(r.Context(), slog.LevelError, "dashboard state", slog.String("error", err.Error()))
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	return mux
}

// State returns what the dashboard shows v now, jobs included, which it
// reads within a bound of its own (2s).
func (d *Dashboard) State(ctx context.Context, v View) State {
	st := d.Overview(v)
	if d.src.Jobs != nil {
		jctx, cancel := context.WithTimeout(ctx, jobStatsTimeout)
		js, err := d.src.Jobs(jctx, JobsQuery{Caller: v.Caller, All: v.AllCallers, Recent: RecentJobs})
		cancel()
		if err != nil {
			js = JobsState{Error: err.Error()}
		}
		st.Jobs = &js
	}
	return st
}

// Overview is [Dashboard.State] without the jobs, which cost reads of the
// job store: only what the ingress holds in memory that v may see, the
// rows and workers' methods of the methods it may call, and its own
// errors; everything for a view of all callers.
func (d *Dashboard) Overview(v View) State {
	now := time.Now()
	var st State
	st.Now = now
	st.Caller, st.AllCallers = v.Caller, v.AllCallers
	st.WindowSeconds = int(windowSeconds)
	st.Ingress.ID = d.src.ID
	st.Ingress.Started = d.src.Stats.Started()
	st.Ingress.UptimeSeconds = now.Sub(d.src.Stats.Started()).Seconds()
	st.Ingress.InFlight = d.src.InFlight()

	reg := d.src.Registry
	var workers map[string]int
	if reg != nil {
		st.Discovery = true
		workers = map[string]int{}
		for _, t := range reg.Catalog().Tools {
			workers[t.Name] = t.Workers
		}
		for _, w := range reg.Workers() {
			st.Workers = append(st.Workers, WorkerState{ID: w.ID, Methods: w.Methods, Expires: w.Expires})
		}
	}
	seen := map[string]bool{}
	for _, m := range d.src.Stats.Snapshot() {
		if !v.shows(m.Method) {
			continue
		}
		ms := m.MethodStatus()
		if reg != nil && !strings.HasPrefix(m.Method, "_") && !schema.IsReserved(m.Method) {
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
		if !seen[name] && v.shows(name) {
			n := n
			st.Methods = append(st.Methods, bus.MethodStatus{Method: name, Workers: &n})
		}
	}
	sortMethods(st.Methods)
	if !v.AllCallers {
		// The ingress's count covers every caller's calls; a caller sees
		// the sum of the rows it is shown.
		st.Ingress.InFlight = 0
		for _, m := range st.Methods {
			st.Ingress.InFlight += m.InFlight
		}
		st.Workers = visibleWorkers(st.Workers, v.shows)
	}
	for _, e := range d.src.Stats.RecentErrors() {
		if !v.AllCallers && e.Caller != v.Caller {
			continue
		}
		st.RecentErrors = append(st.RecentErrors, ErrorState{
			Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code, Message: e.Message, TraceID: e.TraceID,
		})
	}
	if st.Methods == nil {
		st.Methods = []bus.MethodStatus{}
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
