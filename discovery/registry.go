package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Feed delivers the workers' discovery announcements (the JSON bodies of
// PROTOCOL.md section 9) to a [Registry]. *bus.Announcements is one.
type Feed interface {
	// Watch calls fn with every announcement, one at a time, until stop
	// is called; fn is not called after stop returns. method is the
	// method or pattern the announcement's subject names, or "" for the
	// one subject older workers share.
	Watch(fn func(method string, announcement []byte)) (stop func(), err error)
}

// missedAnnouncements is how many announce intervals a worker may stay
// silent before the registry forgets the methods it announced.
const missedAnnouncements = 3

// complainEvery is how often at most the registry logs one kind of
// trouble with announcements (a kind of dropped announcement, or a broken
// or conflicting descriptor of one method), so that a flood of them
// cannot flood the log.
const complainEvery = time.Minute

// maxComplaints bounds the kinds of trouble the registry remembers
// logging.
const maxComplaints = 1024

// Problem kinds of [Problem].
const (
	// ProblemBroken: a descriptor breaks the format, is over one of the
	// limits of an announcement (bus.CheckDescriptorLimits), or its
	// schema does not compile; it is left out, the worker's other tools
	// are not.
	ProblemBroken = "broken"
	// ProblemConflict: some workers of one method advertise a descriptor
	// other than the one in force. The one in force stays: the one of the
	// workers that served the method before them (see [Registry]), and
	// params are validated against it.
	ProblemConflict = "conflict"
)

// Problem is a descriptor the registry could not use as it is, reported
// in rpc.discover.
type Problem struct {
	Kind   string `json:"kind"`
	Method string `json:"method"`
	// Workers names the workers of the problem: for a conflict, those
	// whose descriptor is not in force.
	Workers []string `json:"workers"`
	Reason  string   `json:"reason"`
}

// Tool is a live method of the registry: its descriptor and how many
// workers serve it now.
type Tool struct {
	schema.Descriptor
	// Workers counts the workers advertising it, whatever their
	// descriptor.
	Workers int `json:"workers"`
	// Conflict is set when some of them advertise a descriptor other
	// than the one in force (see [ProblemConflict]).
	Conflict bool `json:"conflict,omitempty"`

	params   *jsonschema.Schema // compiled Params; nil when there are none
	key      string             // canonical form of the descriptor
	given    map[string]bool    // the keys of every descriptor its workers give
	others   string             // the workers giving another than the one in force, comma-separated
	conflict *Problem           // the problem of Conflict; nil without
	// differs and conflictSince are the rest of [Tool.Conflicting].
	differs       []string
	conflictSince time.Time
}

// Conflict is what the workers of a live tool disagree on, as
// [Tool.Conflicting] tells it.
type Conflict struct {
	// Method names the tool: a method, or a pattern.
	Method string `json:"method"`
	// Kept counts the workers that give the descriptor in force, which
	// params are validated against.
	Kept int `json:"kept"`
	// Others names the workers that give another descriptor, sorted.
	Others []string `json:"others"`
	// Differs names the members of the descriptor, as PROTOCOL.md section
	// 9 spells them ("description", "params", ...), in which another
	// descriptor differs from the one in force, sorted.
	Differs []string `json:"differs"`
	// Since is when this registry had heard the workers of both
	// descriptors first: the later of the first announcement of the
	// method by a worker of the one in force and by one of another.
	Since time.Time `json:"since"`
}

// Conflicting returns what t's workers disagree on, and whether they do
// (that is, whether t.Conflict is set).
func (t Tool) Conflicting() (Conflict, bool) {
	if t.conflict == nil {
		return Conflict{}, false
	}
	return Conflict{
		Method:  t.Name,
		Kept:    t.Workers - len(t.conflict.Workers),
		Others:  slices.Clone(t.conflict.Workers),
		Differs: slices.Clone(t.differs),
		Since:   t.conflictSince,
	}, true
}

// Catalog is what the registry knows at one moment.
type Catalog struct {
	// Tools holds the live methods and patterns, sorted by name.
	Tools []Tool `json:"tools"`
	// Problems holds the broken and conflicting descriptors, sorted.
	Problems []Problem `json:"problems"`
}

// announcer is what the registry holds of one worker: an entry per method
// it announced.
type announcer struct {
	methods map[string]*entry
	// shared is set while the worker announces on the shared subject of
	// older workers, until it would be forgotten: it is warned about
	// once.
	shared time.Time
}

// entry is one method as one worker announced it.
type entry struct {
	tool   compiled // zero when broken is set
	broken *Problem
	// since is when the worker first announced it, heard when last;
	// expires is when it is forgotten unless announced again.
	since, heard, expires time.Time
	// shared is set when it came in a whole announcement on the shared
	// subject, which replaces every such entry of the worker.
	shared bool
}

// compiled is a descriptor with its compiled params schema.
type compiled struct {
	desc   schema.Descriptor
	params *jsonschema.Schema
	key    string // canonical form of the descriptor, to compare workers'
}

// Registry is the live catalogue of the cluster's tools, built from the
// workers' discovery announcements: each worker announces each of its
// methods on a subject of its own, and a method of a worker appears with
// its first announcement and goes when the worker says it leaves or
// misses three of its intervals. It validates params against the
// advertised schemas (compiled once per schema, see [Layer]) and feeds
// rpc.discover, GET /openrpc.json ([Discoverer]) and the ingress's MCP
// front door.
//
// When workers of a method disagree on its descriptor, the one in force
// is the incumbent's: the known descriptor of the method (below) while
// some live worker gives it, else that of the worker announcing it the
// longest. A newcomer's different descriptor is a [ProblemConflict] and
// changes nothing until the workers giving the one in force are gone, as
// when a rolling deploy changes a schema; params are always validated
// against the descriptor in force.
//
// Beyond the live tools it keeps the known ones: every tool a worker
// advertised, with its descriptor, for the retention period
// ([WithRetention]) after its last worker was seen, once the tool was
// served, and for [UnservedRetention] when it never was (see
// [ServedAfter]), so that a tool whose workers are scaled to zero is
// still told from one that never existed ([Registry.Known],
// [Registry.Check]). With [Registry.Persist] the known tools live in a
// JetStream bucket that every registry of the cluster shares, and outlast
// restarts; the bucket's descriptor of a tool is then the incumbent for
// every registry.
//
// Make one with [New] and start it with [Registry.Start]. Its methods are
// safe for concurrent use.
type Registry struct {
	log       *slog.Logger
	now       func() time.Time
	retention time.Duration

	mu         sync.Mutex
	announcers map[string]*announcer
	// byName indexes the entries of announcers by method, then worker.
	byName map[string]map[string]*entry
	// live holds the live tools, each brought up to date when one of its
	// entries changes ([Registry.refreshLocked]).
	live    map[string]*Tool
	known   map[string]*knownTool // every tool advertised within the retention
	store   *toolStore            // nil until Persist
	closed  bool
	catalog *Catalog // cached; nil when it must be rebuilt
	// schemas caches compiled params schemas by their text; see
	// compileLocked.
	schemas  map[string]*jsonschema.Schema
	watchers map[int]func()
	version  uint64 // counts the changes of the catalog
	nextID   int
	// complained is when each kind of dropped announcement was last
	// logged, and how many went unlogged since.
	complained map[string]*complaint

	stopFeed func()
	quit     chan struct{}
	done     chan struct{}
}

// complaint is the log of one kind of dropped announcement.
type complaint struct {
	at      time.Time
	dropped int
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

// WithRetention sets how long a served tool stays known after its last
// worker was seen (default [DefaultRetention]). It must be at least a
// minute.
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
		log:        slog.Default(),
		now:        time.Now,
		retention:  DefaultRetention,
		announcers: map[string]*announcer{},
		byName:     map[string]map[string]*entry{},
		live:       map[string]*Tool{},
		known:      map[string]*knownTool{},
		schemas:    map[string]*jsonschema.Schema{},
		watchers:   map[int]func(){},
		complained: map[string]*complaint{},
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
	stop, err := feed.Watch(func(method string, data []byte) {
		if method == "" {
			r.Observe(data)
			return
		}
		r.ObserveMethod(method, data)
	})
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

// expire forgets the methods whose workers stopped announcing them before
// now, and brings the known tools up to date: tools become served, known
// descriptors give way, and tools past their retention are forgotten.
func (r *Registry) expire(now time.Time) {
	r.mu.Lock()
	changed := false
	for id, w := range r.announcers {
		for name, e := range w.methods {
			if now.After(e.expires) {
				r.dropLocked(id, name)
				r.refreshLocked(name, now)
				changed = true
			}
		}
		if len(w.methods) == 0 && now.After(w.shared) {
			r.log.Info("worker stopped announcing; its tools are gone", "worker", id)
			delete(r.announcers, id)
		}
	}
	r.reconcileLocked(now)
	watchers := r.changedLocked(changed)
	r.mu.Unlock()
	notify(watchers)
}

// complainLocked logs a dropped announcement of kind, at most once per
// [complainEvery] for each kind, with how many were dropped unlogged
// since.
func (r *Registry) complainLocked(kind, msg string, args ...any) {
	now := r.now()
	c := r.complained[kind]
	if c == nil {
		if len(r.complained) >= maxComplaints {
			// Kinds named after methods could grow without end; starting
			// over costs at most one more line per kind.
			clear(r.complained)
		}
		c = &complaint{}
		r.complained[kind] = c
	}
	if !c.at.IsZero() && now.Sub(c.at) < complainEvery {
		c.dropped++
		return
	}
	r.log.Warn(msg, append(args, "dropped_since_last_logged", c.dropped)...)
	c.at, c.dropped = now, 0
}

// parse reads an announcement, or logs why it cannot and returns false.
func (r *Registry) parse(data []byte) (schema.Announcement, []schema.BadTool, bool) {
	a, bad, err := schema.ParseAnnouncement(data)
	switch {
	case err != nil:
	case len(a.Worker) > bus.MaxWorkerIDBytes:
		err = fmt.Errorf("a worker id of %d bytes, over the limit of %d", len(a.Worker), bus.MaxWorkerIDBytes)
	case strings.ContainsFunc(a.Worker, unicode.IsControl):
		err = errors.New("a worker id with control characters")
	}
	if err != nil {
		r.mu.Lock()
		r.complainLocked("unreadable", "ignored an announcement that cannot be read", "err", err)
		r.mu.Unlock()
		return a, nil, false
	}
	return a, bad, true
}

// expiry returns when the methods of a stop being known unless announced
// again: three of its intervals after now, an interval being at most
// bus.MaxAnnounceInterval whatever a says.
func expiry(a schema.Announcement, now time.Time) time.Time {
	return now.Add(missedAnnouncements * min(a.Interval(), bus.MaxAnnounceInterval))
}

// ObserveMethod takes one announcement of revision 8, as the feed
// delivers it: method is the method or pattern its subject names, and the
// announcement must carry exactly one descriptor, of that name. One that
// does not is dropped (and logged at most once a minute): the subject is
// what NATS permissions let the worker publish on, so the descriptor must
// not be of another tool. A leaving announcement forgets the worker's
// method.
func (r *Registry) ObserveMethod(method string, data []byte) {
	a, bad, ok := r.parse(data)
	if !ok {
		return
	}
	name := ""
	switch {
	case len(a.Tools) == 1 && len(bad) == 0:
		name = a.Tools[0].Name
	case len(a.Tools) == 0 && len(bad) == 1:
		name = bad[0].Name
	}
	now := r.now()
	r.mu.Lock()
	if name == "" || name != method {
		r.complainLocked("mismatch", "dropped an announcement whose descriptor is not the one of its subject's method; it must carry one descriptor, named as the subject",
			"subject_method", method, "worker", a.Worker, "descriptors", len(a.Tools)+len(bad))
		r.mu.Unlock()
		return
	}
	var changed bool
	if a.Leaving {
		changed = r.dropLocked(a.Worker, method)
		if w := r.announcers[a.Worker]; w != nil && len(w.methods) == 0 && w.shared.IsZero() {
			delete(r.announcers, a.Worker)
		}
	} else {
		e := &entry{heard: now, since: now, expires: expiry(a, now)}
		if len(bad) == 1 {
			e.broken = brokenProblem(a.Worker, bad[0].Name, bad[0].Err)
		} else {
			r.fillLocked(e, a.Worker, a.Tools[0])
		}
		changed = r.putLocked(a.Worker, method, e)
	}
	if changed {
		r.refreshLocked(method, now)
	}
	watchers := r.changedLocked(changed)
	r.mu.Unlock()
	notify(watchers)
}

// Observe takes one announcement on the one subject that workers older
// than revision 8 share, as the feed delivers it: the worker's whole list
// of tools, which replaces what it announced there before. It is accepted
// for a release, with a warning logged once per worker: anyone who may
// publish there may announce any tool, so the shipped NATS configuration
// no longer lets workers publish there. An unreadable announcement is
// logged and ignored.
func (r *Registry) Observe(data []byte) {
	a, bad, ok := r.parse(data)
	if !ok {
		return
	}
	now := r.now()
	r.mu.Lock()
	w := r.announcers[a.Worker]
	touched := map[string]bool{}
	if a.Leaving {
		if w != nil {
			for name := range w.methods {
				r.dropLocked(a.Worker, name)
				touched[name] = true
			}
			delete(r.announcers, a.Worker)
		}
	} else {
		if w == nil {
			w = &announcer{methods: map[string]*entry{}}
			r.announcers[a.Worker] = w
		}
		if w.shared.IsZero() {
			r.log.Warn("a worker announces its tools on the shared subject of workers older than protocol revision 8; accepted for this release, but any worker may announce any tool there: upgrade the worker so that it announces each method on its own subject",
				"worker", a.Worker)
		}
		expires := expiry(a, now)
		w.shared = expires
		listed := map[string]*entry{}
		for _, d := range a.Tools {
			e := &entry{heard: now, since: now, expires: expires, shared: true}
			r.fillLocked(e, a.Worker, d)
			listed[d.Name] = e
		}
		for _, b := range bad {
			listed[b.Name] = &entry{heard: now, since: now, expires: expires, shared: true, broken: brokenProblem(a.Worker, b.Name, b.Err)}
		}
		for name, e := range w.methods {
			if e.shared && listed[name] == nil {
				r.dropLocked(a.Worker, name)
				touched[name] = true
			}
		}
		for name, e := range listed {
			if r.putLocked(a.Worker, name, e) {
				touched[name] = true
			}
		}
	}
	for name := range touched {
		r.refreshLocked(name, now)
	}
	watchers := r.changedLocked(len(touched) > 0)
	r.mu.Unlock()
	notify(watchers)
}

// fillLocked makes e the entry of descriptor d, or a broken one when d is
// over a limit or its schema does not compile.
func (r *Registry) fillLocked(e *entry, worker string, d schema.Descriptor) {
	if err := bus.CheckDescriptorLimits(d); err != nil {
		e.broken = brokenProblem(worker, d.Name, err)
		return
	}
	c, err := r.compileLocked(d)
	if err != nil {
		e.broken = brokenProblem(worker, d.Name, err)
		return
	}
	e.tool = c
}

// maxProblemText bounds the method and reason of a problem: a broken
// descriptor's name may be anything, and a schema compiler's complaint
// may quote the schema.
const maxProblemText = 512

func brokenProblem(worker, name string, err error) *Problem {
	return &Problem{Kind: ProblemBroken, Method: clip(name, maxProblemText), Workers: []string{worker}, Reason: clip(err.Error(), maxProblemText)}
}

// clip returns s cut to at most n bytes, on a character boundary, with an
// ellipsis when it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s[:n], "")
	return s + "…"
}

// putLocked records e as worker's entry of method, keeping when it was
// first announced, and reports whether that changes the catalogue. A new
// broken descriptor is logged.
func (r *Registry) putLocked(worker, method string, e *entry) bool {
	w := r.announcers[worker]
	if w == nil {
		w = &announcer{methods: map[string]*entry{}}
		r.announcers[worker] = w
	}
	old := w.methods[method]
	w.methods[method] = e
	of := r.byName[method]
	if of == nil {
		of = map[string]*entry{}
		r.byName[method] = of
	}
	of[worker] = e
	if k := r.known[method]; k != nil {
		k.heard = e.heard
	}
	if old != nil {
		e.since = old.since
		if old.tool.key == e.tool.key && sameBroken(old.broken, e.broken) {
			return false
		}
	}
	if e.broken != nil {
		r.complainLocked("broken:"+e.broken.Method, "broken tool descriptor", "worker", worker, "method", e.broken.Method, "reason", e.broken.Reason)
	}
	return true
}

func sameBroken(a, b *Problem) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Reason == b.Reason
}

// dropLocked forgets worker's entry of method, and reports whether it had
// one. The worker's record stays; its caller drops it when it is empty.
func (r *Registry) dropLocked(worker, method string) bool {
	w := r.announcers[worker]
	if w == nil || w.methods[method] == nil {
		return false
	}
	delete(w.methods, method)
	if of := r.byName[method]; of != nil {
		delete(of, worker)
		if len(of) == 0 {
			delete(r.byName, method)
		}
	}
	return true
}

// refreshLocked recomputes the live tool of name from its entries, after
// one of them changed, and brings its known tool up to date.
func (r *Registry) refreshLocked(name string, now time.Time) {
	r.catalog = nil
	t := r.liveToolLocked(name, now)
	if t == nil {
		delete(r.live, name)
	} else {
		r.live[name] = t
	}
	r.reconcileToolLocked(name, now)
}

// liveToolLocked returns the live tool of name, or nil when no worker
// gives a usable descriptor of it. The descriptor in force is the
// incumbent's: the known descriptor while some worker gives it, else that
// of the worker announcing it the longest (and of the smallest id among
// equals).
func (r *Registry) liveToolLocked(name string, now time.Time) *Tool {
	type given struct {
		worker string
		e      *entry
	}
	var g []given
	for id, e := range r.byName[name] {
		if e.broken == nil {
			g = append(g, given{id, e})
		}
	}
	if len(g) == 0 {
		return nil
	}
	slices.SortFunc(g, func(a, b given) int {
		if c := a.e.since.Compare(b.e.since); c != 0 {
			return c
		}
		return strings.Compare(a.worker, b.worker)
	})
	t := &Tool{Workers: len(g), given: map[string]bool{}}
	for _, x := range g {
		t.given[x.e.tool.key] = true
	}
	inForce := g[0].e.tool
	if k := r.known[name]; k != nil && k.current(now, r.keepFor(k)) && t.given[k.key] {
		inForce = k.compiled
	}
	t.Descriptor, t.params, t.key = inForce.desc, inForce.params, inForce.key
	if len(t.given) > 1 {
		t.Conflict = true
		var others []string
		var keptSince, otherSince time.Time
		kept := members(inForce.key)
		differs := map[string]bool{}
		compared := map[string]bool{inForce.key: true}
		for _, x := range g { // by since: the first of each side is its earliest
			if x.e.tool.key == inForce.key {
				if keptSince.IsZero() {
					keptSince = x.e.since
				}
				continue
			}
			others = append(others, x.worker)
			if otherSince.IsZero() {
				otherSince = x.e.since
			}
			if !compared[x.e.tool.key] {
				compared[x.e.tool.key] = true
				differingMembers(differs, kept, members(x.e.tool.key))
			}
		}
		slices.Sort(others)
		t.others = strings.Join(others, ",")
		t.differs = slices.Sorted(maps.Keys(differs))
		t.conflictSince = keptSince
		if otherSince.After(keptSince) {
			t.conflictSince = otherSince
		}
		t.conflict = &Problem{Kind: ProblemConflict, Method: name, Workers: others,
			Reason: fmt.Sprintf("%d of the %d workers of the method advertise a descriptor other than the one in force, which the workers that served it first give; calls are validated against the one in force",
				len(others), len(g))}
	}
	return t
}

// members returns the members of a descriptor's canonical form.
func members(key string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal([]byte(key), &m) // canonical made it of a descriptor
	return m
}

// differingMembers adds to into the names of the members that a and b,
// the members of two canonical forms, do not have alike. Their values
// are canonical too, so equal values have equal bytes.
func differingMembers(into map[string]bool, a, b map[string]json.RawMessage) {
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			into[k] = true
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			into[k] = true
		}
	}
}

// maxCachedSchemas bounds the cache of compiled schemas.
const maxCachedSchemas = 4096

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
	if len(r.schemas) >= maxCachedSchemas {
		// Schemas in use stay with their tools; only the sharing of
		// compilations starts again, so that workers announcing ever new
		// schemas cannot grow the cache.
		clear(r.schemas)
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
	r.version++
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
	cat, _ := r.VersionedCatalog()
	return cat
}

// VersionedCatalog returns the catalog with its version, a number that
// grows with every change of the catalog, so that a follower can tell
// cheaply ([Registry.Version]) whether it has the newest.
func (r *Registry) VersionedCatalog() (Catalog, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.catalogLocked(), r.version
}

// Version returns the version of the catalog: it grows with every change
// of it ([Registry.Watch] is told of the same changes).
func (r *Registry) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

func (r *Registry) catalogLocked() *Catalog {
	if r.catalog != nil {
		return r.catalog
	}
	cat := &Catalog{Tools: make([]Tool, 0, len(r.live)), Problems: []Problem{}}
	for _, t := range r.live {
		cat.Tools = append(cat.Tools, *t)
		if t.conflict != nil {
			cat.Problems = append(cat.Problems, *t.conflict)
		}
	}
	for _, w := range r.announcers {
		for _, e := range w.methods {
			if e.broken != nil {
				cat.Problems = append(cat.Problems, *e.broken)
			}
		}
	}
	slices.SortFunc(cat.Tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(cat.Problems, func(a, b Problem) int {
		if c := strings.Compare(a.Method, b.Method); c != 0 {
			return c
		}
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(strings.Join(a.Workers, ","), strings.Join(b.Workers, ","))
	})
	r.catalog = cat
	return cat
}

// Lookup returns the live tool serving method: the one of that name, or
// else a pattern matching it.
func (r *Registry) Lookup(method string) (Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.live[method]; t != nil {
		return *t, true
	}
	for _, t := range r.catalogLocked().Tools {
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
	if r.live[method] != nil {
		return true // served now, so known: the common case of every call
	}
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
	out := make([]Worker, 0, len(r.announcers))
	for id, w := range r.announcers {
		ws := Worker{ID: id, Methods: make([]string, 0, len(w.methods))}
		for name, e := range w.methods {
			if e.expires.After(ws.Expires) {
				ws.Expires = e.expires
			}
			if e.broken == nil {
				ws.Methods = append(ws.Methods, name)
			}
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
		if k.current(now, r.keepFor(k)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// knownLocked returns the known tool of method, by its name or else by a
// pattern matching it, or nil.
func (r *Registry) knownLocked(method string, now time.Time) *knownTool {
	if k := r.known[method]; k != nil && k.current(now, r.keepFor(k)) {
		return k
	}
	for name, k := range r.known {
		if k.current(now, r.keepFor(k)) && schema.MatchMethod(name, method) {
			return k
		}
	}
	return nil
}
