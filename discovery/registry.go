package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/schema"
)

// Feed delivers the workers' discovery announcements (the JSON bodies of
// PROTOCOL.md section 9) to a [Registry]. *bus.Announcements is one.
type Feed interface {
	// Watch calls fn with every announcement, one at a time, until stop
	// is called; fn is not called after stop returns.
	Watch(fn func(announcement []byte)) (stop func(), err error)
}

// missedAnnouncements is how many announce intervals a worker may stay
// silent before the registry forgets it.
const missedAnnouncements = 3

// Problem kinds of [Problem].
const (
	// ProblemBroken: a descriptor breaks the format or its schema does not
	// compile; it is left out, the worker's other tools are not.
	ProblemBroken = "broken"
	// ProblemConflict: the workers of one method advertise different
	// descriptors; the method stays listed, with the descriptor most of
	// them give, and its params are not validated.
	ProblemConflict = "conflict"
)

// Problem is a descriptor the registry could not use as it is, reported
// in rpc.discover.
type Problem struct {
	Kind    string   `json:"kind"`
	Method  string   `json:"method"`
	Workers []string `json:"workers"`
	Reason  string   `json:"reason"`
}

// Tool is a live method of the registry: its descriptor and how many
// workers serve it now.
type Tool struct {
	schema.Descriptor
	// Workers counts the workers advertising it.
	Workers int `json:"workers"`
	// Conflict is set when they disagree on its descriptor (see
	// [ProblemConflict]).
	Conflict bool `json:"conflict,omitempty"`

	params *jsonschema.Schema // compiled Params; nil when there are none
	key    string             // canonical form of the descriptor
}

// Catalog is what the registry knows at one moment.
type Catalog struct {
	// Tools holds the live methods and patterns, sorted by name.
	Tools []Tool `json:"tools"`
	// Problems holds the broken and conflicting descriptors, sorted.
	Problems []Problem `json:"problems"`
}

// workerEntry is what the registry holds of one worker.
type workerEntry struct {
	tools   []compiled
	broken  []Problem
	expires time.Time
}

// compiled is a descriptor with its compiled params schema.
type compiled struct {
	desc   schema.Descriptor
	params *jsonschema.Schema
	key    string // canonical form of the descriptor, to compare workers'
}

// Registry is the live catalogue of the cluster's tools, built from the
// workers' discovery announcements: a worker's tools appear with its first
// announcement and go when it leaves or misses three of its intervals. It
// validates params against the advertised schemas (compiled once per
// schema, see [Layer]) and feeds rpc.discover, GET /openrpc.json
// ([Discoverer]) and the ingress's MCP front door.
//
// Beyond the live tools it keeps the known ones: every tool a worker
// advertised, with its descriptor, for the retention period
// ([WithRetention]) after its last worker was seen, so that a tool whose
// workers are scaled to zero is still told from one that never existed
// ([Registry.Known], [Registry.Check]). With [Registry.Persist] the known
// tools live in a JetStream bucket that every registry of the cluster
// shares, and outlast restarts.
//
// Make one with [New] and start it with [Registry.Start]. Its methods are
// safe for concurrent use.
type Registry struct {
	log       *slog.Logger
	now       func() time.Time
	retention time.Duration

	mu       sync.Mutex
	workers  map[string]*workerEntry
	known    map[string]*knownTool // every tool advertised within the retention
	store    *toolStore            // nil until Persist
	closed   bool
	catalog  *Catalog // cached; nil when it must be rebuilt
	schemas  map[string]*jsonschema.Schema
	watchers map[int]func()
	nextID   int

	stopFeed func()
	quit     chan struct{}
	done     chan struct{}
}

// Option configures [New].
type Option func(*Registry) error

// WithLogger sets the logger for broken and conflicting descriptors
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(r *Registry) error {
		if l == nil {
			return errors.New("discovery: nil logger")
		}
		r.log = l
		return nil
	}
}

// WithRetention sets how long a tool stays known after its last worker
// was seen (default [DefaultRetention]). It must be at least a minute.
func WithRetention(d time.Duration) Option {
	return func(r *Registry) error {
		if d < time.Minute {
			return fmt.Errorf("discovery: tools retention must be at least 1m, got %v", d)
		}
		r.retention = d
		return nil
	}
}

// New returns an empty registry.
func New(opts ...Option) (*Registry, error) {
	r := &Registry{
		log:       slog.Default(),
		now:       time.Now,
		retention: DefaultRetention,
		workers:   map[string]*workerEntry{},
		known:     map[string]*knownTool{},
		schemas:   map[string]*jsonschema.Schema{},
		watchers:  map[int]func(){},
	}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	r.log = r.log.With("component", "registry")
	return r, nil
}

// Start follows feed, and forgets silent workers, until [Registry.Close].
func (r *Registry) Start(feed Feed) error {
	if feed == nil {
		return errors.New("discovery: nil feed")
	}
	r.mu.Lock()
	if r.quit != nil {
		r.mu.Unlock()
		return errors.New("discovery: registry already started")
	}
	r.quit, r.done = make(chan struct{}), make(chan struct{})
	r.mu.Unlock()
	stop, err := feed.Watch(r.Observe)
	if err != nil {
		close(r.done)
		return fmt.Errorf("discovery: watch announcements: %w", err)
	}
	r.mu.Lock()
	r.stopFeed = stop
	r.mu.Unlock()
	go r.sweep()
	return nil
}

// Close stops following the feed and the bucket of [Registry.Persist].
// The registry keeps answering from what it knew.
func (r *Registry) Close() {
	r.mu.Lock()
	quit, done, stop, store := r.quit, r.done, r.stopFeed, r.store
	r.stopFeed, r.closed = nil, true
	r.mu.Unlock()
	if store != nil {
		store.stop()
	}
	if quit == nil {
		return
	}
	if stop != nil {
		stop()
	}
	select {
	case <-quit:
	default:
		close(quit)
	}
	<-done
}

// sweep forgets workers past their expiry, checking a few times a second:
// often enough that a vanished worker's tools go within its three
// intervals and a little more.
func (r *Registry) sweep() {
	defer close(r.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
		}
		r.expire(r.now())
	}
}

// expire forgets the workers whose announcements stopped before now, and
// the tools known longer than the retention after their last worker.
func (r *Registry) expire(now time.Time) {
	r.mu.Lock()
	changed := false
	for id, w := range r.workers {
		if now.After(w.expires) {
			r.log.Info("worker stopped announcing; its tools are gone", "worker", id)
			delete(r.workers, id)
			changed = true
		}
	}
	watchers := r.changedLocked(changed)
	r.reconcileLocked(now)
	r.mu.Unlock()
	notify(watchers)
}

// Observe takes one announcement, as the feed delivers it. An unreadable
// announcement is logged and ignored.
func (r *Registry) Observe(data []byte) {
	a, bad, err := schema.ParseAnnouncement(data)
	if err != nil {
		r.log.Warn("ignored an announcement", "err", err)
		return
	}
	if a.Leaving {
		r.mu.Lock()
		_, had := r.workers[a.Worker]
		delete(r.workers, a.Worker)
		watchers := r.changedLocked(had)
		if had {
			r.reconcileLocked(r.now())
		}
		r.mu.Unlock()
		notify(watchers)
		return
	}
	w := &workerEntry{expires: r.now().Add(missedAnnouncements * a.Interval())}
	for _, b := range bad {
		w.broken = append(w.broken, Problem{Kind: ProblemBroken, Method: b.Name, Workers: []string{a.Worker}, Reason: b.Err.Error()})
	}
	r.mu.Lock()
	for _, d := range a.Tools {
		c, err := r.compileLocked(d)
		if err != nil {
			w.broken = append(w.broken, Problem{Kind: ProblemBroken, Method: d.Name, Workers: []string{a.Worker}, Reason: err.Error()})
			continue
		}
		w.tools = append(w.tools, c)
	}
	old, had := r.workers[a.Worker]
	r.workers[a.Worker] = w
	for _, p := range w.broken {
		if !had || !slices.ContainsFunc(old.broken, func(q Problem) bool { return q.Method == p.Method && q.Reason == p.Reason }) {
			r.log.Warn("broken tool descriptor", "worker", a.Worker, "method", p.Method, "reason", p.Reason)
		}
	}
	changed := !had || !sameTools(old, w)
	watchers := r.changedLocked(changed)
	if changed {
		r.reconcileLocked(r.now())
	}
	r.mu.Unlock()
	notify(watchers)
}

func sameTools(a, b *workerEntry) bool {
	return slices.EqualFunc(a.tools, b.tools, func(x, y compiled) bool { return x.key == y.key }) &&
		slices.EqualFunc(a.broken, b.broken, func(x, y Problem) bool { return x.Method == y.Method && x.Reason == y.Reason })
}

// compileLocked compiles d's params schema, once per distinct schema.
func (r *Registry) compileLocked(d schema.Descriptor) (compiled, error) {
	key, err := canonical(d)
	if err != nil {
		return compiled{}, err
	}
	c := compiled{desc: d, key: key}
	if len(d.Params) == 0 {
		return c, nil
	}
	skey := string(d.Params)
	if s, ok := r.schemas[skey]; ok {
		c.params = s
		return c, nil
	}
	s, err := compileSchema(d.Params)
	if err != nil {
		return compiled{}, fmt.Errorf("params schema: %w", err)
	}
	r.schemas[skey] = s
	c.params = s
	return c, nil
}

// compileSchema compiles a JSON Schema (draft 2020-12 unless it says
// otherwise) that refers to nothing outside itself: the default loader of
// the compiler reads no network resources.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	const url = "toolbus:///params.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// canonical returns d as JSON with sorted members, to compare descriptors.
func canonical(d schema.Descriptor) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "", err
	}
	b, err = json.Marshal(v)
	return string(b), err
}

// changedLocked drops the cached catalog when changed and returns the
// watchers to tell, which the caller runs once it has released r.mu.
func (r *Registry) changedLocked(changed bool) []func() {
	if !changed {
		return nil
	}
	r.catalog = nil
	watchers := make([]func(), 0, len(r.watchers))
	for _, w := range r.watchers {
		watchers = append(watchers, w)
	}
	return watchers
}

func notify(watchers []func()) {
	for _, w := range watchers {
		w()
	}
}

// Watch calls fn after every change of the catalog, on the goroutine that
// made the change (the feed's or the registry's own); fn must not block. cancel stops it.
func (r *Registry) Watch(fn func()) (cancel func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextID
	r.nextID++
	r.watchers[id] = fn
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.watchers, id)
	}
}

// Catalog returns the live tools and the problems of their descriptors.
// The caller must not change what it returns.
func (r *Registry) Catalog() Catalog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.catalogLocked()
}

func (r *Registry) catalogLocked() *Catalog {
	if r.catalog != nil {
		return r.catalog
	}
	type group struct {
		byKey   map[string][]string // descriptor key → workers
		first   map[string]compiled
		workers int
	}
	groups := map[string]*group{}
	var problems []Problem
	for id, w := range r.workers {
		for _, c := range w.tools {
			g := groups[c.desc.Name]
			if g == nil {
				g = &group{byKey: map[string][]string{}, first: map[string]compiled{}}
				groups[c.desc.Name] = g
			}
			g.byKey[c.key] = append(g.byKey[c.key], id)
			g.first[c.key] = c
			g.workers++
		}
		problems = append(problems, w.broken...)
	}
	cat := &Catalog{Tools: []Tool{}}
	for name, g := range groups {
		keys := make([]string, 0, len(g.byKey))
		for k := range g.byKey {
			slices.Sort(g.byKey[k])
			keys = append(keys, k)
		}
		// The descriptor most workers give wins; among equals, the one of
		// the smallest worker id, so that every ingress picks the same.
		slices.SortFunc(keys, func(a, b string) int {
			if d := len(g.byKey[b]) - len(g.byKey[a]); d != 0 {
				return d
			}
			return strings.Compare(g.byKey[a][0], g.byKey[b][0])
		})
		c := g.first[keys[0]]
		t := Tool{Descriptor: c.desc, Workers: g.workers, params: c.params, key: c.key}
		if len(keys) > 1 {
			t.Conflict = true
			var all []string
			for _, k := range keys {
				all = append(all, g.byKey[k]...)
			}
			slices.Sort(all)
			problems = append(problems, Problem{Kind: ProblemConflict, Method: name, Workers: all,
				Reason: fmt.Sprintf("%d workers advertise %d different descriptors; params are not validated", len(all), len(keys))})
		}
		cat.Tools = append(cat.Tools, t)
	}
	slices.SortFunc(cat.Tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(problems, func(a, b Problem) int {
		if c := strings.Compare(a.Method, b.Method); c != 0 {
			return c
		}
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(strings.Join(a.Workers, ","), strings.Join(b.Workers, ","))
	})
	cat.Problems = problems
	if cat.Problems == nil {
		cat.Problems = []Problem{}
	}
	r.catalog = cat
	return cat
}

// Lookup returns the live tool serving method: the one of that name, or
// else a pattern matching it.
func (r *Registry) Lookup(method string) (Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cat := r.catalogLocked()
	i, ok := slices.BinarySearchFunc(cat.Tools, method, func(t Tool, m string) int { return strings.Compare(t.Name, m) })
	if ok {
		return cat.Tools[i], true
	}
	for _, t := range cat.Tools {
		if t.IsPattern() && schema.MatchMethod(t.Name, method) {
			return t, true
		}
	}
	return Tool{}, false
}

// RetrySafe reports whether method's workers advertise it as safe to run
// twice, all alike, so that a call of it may be published again; it is the
// aggregator's WithRetrySafeFunc when discovery is on.
func (r *Registry) RetrySafe(method string) bool {
	t, ok := r.Lookup(method)
	return ok && t.RetrySafe && !t.Conflict
}

// Known reports whether method (or a pattern matching it) is a known
// tool: live, or advertised by a worker seen within the retention, here or,
// with [Registry.Persist], by any registry sharing the bucket.
func (r *Registry) Known(method string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.knownLocked(method, r.now()) != nil
}

// Worker is one live worker as its announcements describe it.
type Worker struct {
	ID string
	// Methods holds the names and patterns it serves, sorted.
	Methods []string
	// Expires is when the registry forgets it unless it announces again.
	Expires time.Time
}

// Workers returns the live workers, sorted by id.
func (r *Registry) Workers() []Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Worker, 0, len(r.workers))
	for id, w := range r.workers {
		ws := Worker{ID: id, Expires: w.expires, Methods: make([]string, 0, len(w.tools))}
		for _, c := range w.tools {
			ws.Methods = append(ws.Methods, c.desc.Name)
		}
		slices.Sort(ws.Methods)
		out = append(out, ws)
	}
	slices.SortFunc(out, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Names returns the known methods and patterns (see [Registry.Known]),
// live or not, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	out := make([]string, 0, len(r.known))
	for name, k := range r.known {
		if k.current(now, r.retention) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// knownLocked returns the known tool of method, by its name or else by a
// pattern matching it, or nil.
func (r *Registry) knownLocked(method string, now time.Time) *knownTool {
	if k := r.known[method]; k != nil && k.current(now, r.retention) {
		return k
	}
	for name, k := range r.known {
		if k.current(now, r.retention) && schema.MatchMethod(name, method) {
			return k
		}
	}
	return nil
}

// current reports whether k is still known at now.
func (k *knownTool) current(now time.Time, retention time.Duration) bool {
	return k.live || now.Sub(k.seen) <= retention
}
