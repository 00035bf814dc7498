package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/fair"
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
	// Row, when not nil, names the row of Methods that counts the calls
	// of method: method itself, or the label under which calls of
	// methods without a row of their own are counted together (such as
	// "_unknown", a method no worker ever announced). The recent errors
	// name their method so, so that a method has one name on the page.
	Row func(method string) string
	// Fair, when not nil, returns the ingress's fairness window and
	// callers' queues now, as the ingress's FairStats does (the zero
	// value when fairness is off); the Callers panel shows them.
	Fair func() fair.Stats
	// FairMetrics, when not nil, holds the ingress's toolbus_fair_*
	// series with each caller named, from which the Callers panel reads
	// each caller's calls let in, their wait in the queue and the
	// refusals. Without it the panel shows the queues alone.
	FairMetrics prometheus.Gatherer
}

// Dashboard answers what the page at /ui/ shows. Make one with [New]; its
// methods are safe for concurrent use.
type Dashboard struct {
	src         Source
	tmpl        *template.Template
	gathered    gathered
	fairSamples fairSamples
}

// New returns the dashboard of src; src.Stats and src.InFlight are
// required.
func New(src Source) *Dashboard { return &Dashboard{src: src, tmpl: parsePage()} }

// Query is what a request of the state asks beyond its caller's [View].
type Query struct {
	// Replica asks for the trends of one ingress replica by id rather
	// than the cluster's; an operator's view only.
	Replica string
}

// Open reports whether path is the dashboard's, which authenticates its
// requests itself through [Access]: the ingress lets them through
// without credentials, since a browser sends the page's key as a cookie
// rather than in a header, and the page itself must load to ask for one.
// A request with no accepted credentials gets the page and its files,
// which then ask for a key, and no data.
func Open(path string) bool {
	return path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// Access is how the dashboard learns who asks; the server that holds the
// credentials implements it.
type Access interface {
	// View returns what the caller of r may see: the caller of r's own
	// credentials (its headers) when it carries any, else the caller of
	// key, the API key the dashboard's cookie holds or a sign-in posts
	// ("" when none). It fails when no caller was accepted; without
	// authentication every request has the view of everything.
	View(r *http.Request, key string) (View, error)
	// Refuse answers r, whose caller View refused with err, as the
	// server answers any request without accepted credentials (HTTP 401).
	Refuse(w http.ResponseWriter, r *http.Request, err error)
}

// Handler serves the dashboard under /ui/: the page, with what the
// caller may see drawn into it; its script and style sheet; the same
// data at GET /ui/api/state, which the page polls; and signing in and
// out at [SessionPath]. GET /ui redirects to the page.
func (d *Dashboard) Handler(access Access, log *slog.Logger) http.Handler {
	s := &site{d: d, access: access, log: log}
	mux := http.NewServeMux()
	for _, name := range []string{"app.js", "style.css"} {
		mux.HandleFunc("GET /ui/"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Content-Type-Options", "nosniff")
			http.ServeFileFS(w, r, ui, "ui/"+name)
		})
	}
	mux.HandleFunc("GET /ui/{$}", s.page)
	mux.HandleFunc("GET /ui/api/state", s.state)
	// Signing in and out change what the browser holds: another site
	// may not start them.
	csrf := http.NewCrossOriginProtection()
	mux.Handle("POST "+SessionPath, csrf.Handler(http.HandlerFunc(s.signIn)))
	mux.Handle("DELETE "+SessionPath, csrf.Handler(http.HandlerFunc(s.signOut)))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	return mux
}

// site is the dashboard's routes and what they need.
type site struct {
	d      *Dashboard
	access Access
	log    *slog.Logger
}

// caller returns the view of r's caller, by its own credentials or the
// key of its cookie, and whether the cookie held a key.
func (s *site) caller(r *http.Request) (v View, fromCookie bool, err error) {
	key := cookieKey(r)
	v, err = s.access.View(r, key)
	return v, key != "", err
}

// state answers GET /ui/api/state.
func (s *site) state(w http.ResponseWriter, r *http.Request) {
	v, fromCookie, err := s.caller(r)
	if err != nil {
		if fromCookie {
			// A key that is no longer accepted is forgotten, so that
			// the page asks for another.
			clearKeyCookie(w, r)
		}
		s.access.Refuse(w, r, err)
		return
	}
	s.writeState(w, r, v)
}

// writeState answers the state v may see as JSON; the query's replica
// asks for one replica's trends.
func (s *site) writeState(w http.ResponseWriter, r *http.Request, v View) {
	q := Query{Replica: r.URL.Query().Get("replica")}
	b, err := json.Marshal(s.d.State(r.Context(), v, q))
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "dashboard state", slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// State returns what the dashboard shows v now: [Dashboard.Overview],
// the jobs, which it reads within a bound of its own (2s), the trends of
// the cluster or of the replica q names, and for an operator the
// replicas, the workers' processes and NATS. The cluster's statuses are
// gathered at most every few seconds (see [Source.Gather]).
func (d *Dashboard) State(ctx context.Context, v View, q Query) State {
	st := d.Overview(v)
	queued := int64(-1) // the queue's depth, when it was read
	if d.src.Jobs != nil {
		jctx, cancel := context.WithTimeout(ctx, jobStatsTimeout)
		js, err := d.src.Jobs(jctx, JobsQuery{Caller: v.Caller, All: v.AllCallers, Recent: RecentJobs})
		cancel()
		if err != nil {
			js = JobsState{Error: err.Error()}
		} else if v.AllCallers {
			// Every caller's count is the queue's depth, which the
			// trends sample whenever it is read.
			queued = int64(js.ByState["queued"])
			d.src.Stats.RecordJobsQueued(queued)
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
	st.Trends = d.trends(list, v, q.Replica, live{inFlight: d.src.InFlight(), queued: queued})
	if q.Replica == "" {
		// The whole cluster's errors, not only this replica's.
		st.RecentErrors = d.clusterErrors(st.RecentErrors, list, v)
		st.ErrorGroups = groupErrors(st.RecentErrors)
	}
	if v.AllCallers {
		st.Replicas = replicas(list, d.src.ID, st.Ingress.InFlight)
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

// replicas lists the ingress replicas among list, this one first, with
// its calls in flight now (as the page's header shows them) rather than
// when its status was gathered.
func replicas(list []bus.Status, self string, selfInFlight int64) []ReplicaState {
	out := []ReplicaState{}
	now := time.Now()
	for _, s := range list {
		if s.Kind != bus.KindIngress {
			continue
		}
		r := ReplicaState{ID: s.ID, Host: s.Host, Pid: s.Pid, Version: s.Version, InFlight: s.InFlight}
		if s.ID == self {
			r.InFlight = selfInFlight
		}
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
// rows and workers' methods of the methods it may call, its own errors
// and its own row of the Callers panel; everything for a view of all
// callers.
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
	var tools []discovery.Tool
	if reg != nil {
		st.Discovery = true
		tools = reg.Catalog().Tools
		for _, w := range reg.Workers() {
			st.Workers = append(st.Workers, WorkerState{ID: w.ID, Methods: w.Methods})
		}
	}
	seen := map[string]bool{}
	// serving holds the live tool of each row that has one.
	serving := map[string]discovery.Tool{}
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
				serving[m.Method] = t
			}
			ms.Workers = &n
		}
		seen[m.Method] = true
		st.Methods = append(st.Methods, ms)
	}
	for _, t := range tools {
		if !seen[t.Name] && v.shows(t.Name) {
			n := t.Workers
			serving[t.Name] = t
			st.Methods = append(st.Methods, bus.MethodStatus{Method: t.Name, Workers: &n})
		}
	}
	sortMethods(st.Methods)
	st.Conflicts = conflicts(st.Methods, serving)
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
		st.RecentErrors = append(st.RecentErrors, d.errorState(bus.ErrorStatus{
			Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code, Message: e.Message, TraceID: e.TraceID,
		}))
	}
	st.ErrorGroups = groupErrors(st.RecentErrors)
	st.Fair = d.fairState(v, now)
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

// conflicts returns the conflicts of the tools serving rows, by
// serving, in the order of rows.
func conflicts(rows []bus.MethodStatus, serving map[string]discovery.Tool) []MethodConflict {
	out := []MethodConflict{}
	for _, m := range rows {
		if c, ok := serving[m.Method].Conflicting(); ok {
			out = append(out, MethodConflict{Row: m.Method, Conflict: c})
		}
	}
	return out
}

// errorState is the row of the recent errors that shows e, its method
// named as the row of Methods that counts it (see [Source.Row]).
func (d *Dashboard) errorState(e bus.ErrorStatus) ErrorState {
	out := ErrorState{Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code, Message: e.Message, TraceID: e.TraceID}
	if d.src.Row != nil {
		if row := d.src.Row(e.Method); row != e.Method {
			out.Method, out.Sent = row, e.Method
		}
	}
	return out
}

// clusterErrors adds to own, this replica's errors, those the other
// ingress replicas of list report that v may see, newest first, at most
// as many as one replica keeps.
func (d *Dashboard) clusterErrors(own []ErrorState, list []bus.Status, v View) []ErrorState {
	out := slices.Clone(own)
	for _, s := range list {
		if s.Kind != bus.KindIngress || s.ID == d.src.ID {
			continue
		}
		for _, e := range s.RecentErrors {
			if !v.AllCallers && e.Caller != v.Caller {
				continue
			}
			out = append(out, d.errorState(e))
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
		out = append(out, ErrorGroup{Method: e.Method, Sent: e.Sent, Code: e.Code, Class: schema.Classify(e.Code).String(),
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
