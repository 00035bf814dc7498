package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
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
	// Gather, when not nil, returns the status of every ingress and
	// worker of the cluster, as [bus.GatherStatus] does: the trends of
	// every replica and the workers' processes. Without it the trends are
	// this replica's.
	Gather func(ctx context.Context) ([]bus.Status, error)
	// NATS, when not nil, describes the bus as this replica sees it.
	NATS func(ctx context.Context) NATSState
}

// Dashboard answers what the page at /ui/ shows. Make one with [New]; its
// methods are safe for concurrent use.
type Dashboard struct {
	src      Source
	gathered gathered
}

// New returns the dashboard of src; src.Stats and src.InFlight are
// required.
func New(src Source) *Dashboard { return &Dashboard{src: src} }

// Query is what a request of the state asks beyond its caller's [View].
type Query struct {
	// Replica asks for the trends of one ingress replica by id rather
	// than the cluster's; an operator's view only.
	Replica string
}

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
		q := Query{Replica: r.URL.Query().Get("replica")}
		b, err := json.Marshal(d.State(r.Context(), view(r), q))
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

// State returns what the dashboard shows v now: [Dashboard.Overview],
// the jobs, which it reads within a bound of its own (2s), the trends of
// the cluster or of the replica q names, and for an operator the
// replicas, the workers' processes and NATS. The cluster's statuses are
// gathered at most every few seconds (see [Source.Gather]).
func (d *Dashboard) State(ctx context.Context, v View, q Query) State {
	st := d.Overview(v)
	if d.src.Jobs != nil {
		jctx, cancel := context.WithTimeout(ctx, jobStatsTimeout)
		js, err := d.src.Jobs(jctx, JobsQuery{Caller: v.Caller, All: v.AllCallers, Recent: RecentJobs})
		cancel()
		if err != nil {
			js = JobsState{Error: err.Error()}
		} else if v.AllCallers {
			// Every caller's count is the queue's depth, which the
			// trends sample whenever it is read.
			d.src.Stats.RecordJobsQueued(int64(js.ByState["queued"]))
		}
		st.Jobs = &js
	}
	list, err := d.statuses(ctx)
	if err != nil {
		st.Cluster = err.Error()
	}
	if !v.AllCallers {
		q.Replica = ""
	}
	st.Trends = d.trends(list, v, q.Replica)
	if q.Replica == "" {
		// The whole cluster's errors, not only this replica's.
		st.RecentErrors = clusterErrors(st.RecentErrors, list, d.src.ID, v)
		st.ErrorGroups = groupErrors(st.RecentErrors)
	}
	if v.AllCallers {
		st.Replicas = replicas(list, d.src.ID)
		describeWorkers(st.Workers, list, st.Now)
		if d.src.NATS != nil {
			n := d.src.NATS(ctx)
			st.NATS = &n
		}
	}
	if st.Replicas == nil {
		st.Replicas = []ReplicaState{}
	}
	return st
}

// replicas lists the ingress replicas among list, this one first.
func replicas(list []bus.Status, self string) []ReplicaState {
	out := []ReplicaState{}
	now := time.Now()
	for _, s := range list {
		if s.Kind != bus.KindIngress {
			continue
		}
		r := ReplicaState{ID: s.ID, Host: s.Host, Pid: s.Pid, Version: s.Version, InFlight: s.InFlight}
		if !s.Started.IsZero() {
			r.UptimeSeconds = now.Sub(s.Started).Seconds()
		}
		if e, ok := s.Extra["error"].(string); ok {
			r.Error = e
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b ReplicaState) int {
		switch {
		case a.ID == self:
			return -1
		case b.ID == self:
			return 1
		}
		return 0
	})
	return out
}

// describeWorkers adds to each worker what its status answer in list
// says of its process.
func describeWorkers(workers []WorkerState, list []bus.Status, now time.Time) {
	byID := map[string]*bus.Status{}
	for i := range list {
		if list[i].Kind == bus.KindWorker {
			byID[list[i].ID] = &list[i]
		}
	}
	for i := range workers {
		w := &workers[i]
		s := byID[w.ID]
		if s == nil {
			continue
		}
		w.Host, w.Pid, w.Version, w.InFlight = s.Host, s.Pid, s.Version, s.InFlight
		if !s.Started.IsZero() {
			w.Started = s.Started
			w.UptimeSeconds = now.Sub(s.Started).Seconds()
		}
	}
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
	st.WindowSeconds = int(window / time.Second)
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
			st.Workers = append(st.Workers, WorkerState{ID: w.ID, Methods: w.Methods})
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
	st.ErrorGroups = groupErrors(st.RecentErrors)
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

// clusterErrors adds to own, this replica's errors, those the other
// ingress replicas of list report that v may see, newest first, at most
// as many as one replica keeps.
func clusterErrors(own []ErrorState, list []bus.Status, self string, v View) []ErrorState {
	out := slices.Clone(own)
	for _, s := range list {
		if s.Kind != bus.KindIngress || s.ID == self {
			continue
		}
		for _, e := range s.RecentErrors {
			if !v.AllCallers && e.Caller != v.Caller {
				continue
			}
			out = append(out, ErrorState{Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code, Message: e.Message, TraceID: e.TraceID})
		}
	}
	slices.SortStableFunc(out, func(a, b ErrorState) int { return b.Time.Compare(a.Time) })
	if limit := max(len(own), callstats.DefaultRecentErrors); len(out) > limit {
		out = out[:limit]
	}
	return out
}

// groupErrors makes one group of the errors, newest first, of each
// method, code and message, newest group first.
func groupErrors(errs []ErrorState) []ErrorGroup {
	type key struct {
		method, message string
		code            int
	}
	out := []ErrorGroup{}
	at := map[key]int{}
	for _, e := range errs {
		k := key{e.Method, e.Message, e.Code}
		if i, ok := at[k]; ok {
			out[i].Count++
			continue
		}
		at[k] = len(out)
		out = append(out, ErrorGroup{Method: e.Method, Code: e.Code, Class: schema.Classify(e.Code).String(),
			Message: e.Message, Count: 1, Last: e.Time, ID: e.ID, TraceID: e.TraceID})
	}
	return out
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
