package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/options"
	"github.com/toolbus/toolbus/schema"
)

// Errors of registering, starting and stopping a [Runtime], why
// [Runtime.Ready] says it is not ready, and of asking a question ([Ask]).
var (
	// ErrClosed means the runtime has been shut down.
	ErrClosed = errors.New("worker: runtime is shut down")
	// ErrNotStarted means the runtime has not been started yet.
	ErrNotStarted = errors.New("worker: runtime not started")
	// ErrDraining means the runtime's shutdown has begun: it takes no new
	// calls, and may still be finishing those it holds.
	ErrDraining = errors.New("worker: runtime is draining")
	// ErrDisconnected means the runtime's NATS connection is not up now;
	// it may come back by itself.
	ErrDisconnected = errors.New("worker: nats connection is down")
	// ErrStarted means Start was called on a runtime already started.
	ErrStarted = errors.New("worker: runtime already started")
	// ErrDuplicate means a pattern overlaps one registered before, so that
	// some calls would reach both handlers.
	ErrDuplicate = errors.New("worker: method already registered")
	// ErrCannotAsk means the call's caller cannot answer a question: a
	// synchronous call, a notification, a call run by [Runtime.Invoke] or
	// [Runtime.TryInvoke]. Only a job's call can be asked; returned from
	// a handler, it is answered -32000 with data.reason "cannot_ask".
	ErrCannotAsk = errors.New("worker: the caller of this call cannot answer a question: only a job's call can be asked (rpc.jobs.submit)")
	// ErrDeclined means the caller declined the question.
	ErrDeclined = errors.New("worker: the caller declined the question")
	// ErrAskCanceled means the question was dismissed without a choice:
	// the caller went away, or the aggregator could not put it. Returned
	// from a handler, it is answered -32004.
	ErrAskCanceled = errors.New("worker: the question was canceled without an answer")
)

// Runtime serves the tools of one process over NATS. Make one with [New],
// register handlers, call [Runtime.Start], and [Runtime.Shutdown] when done.
// Its methods are safe for concurrent use.
type Runtime struct {
	nc     *nats.Conn
	cfg    config
	log    *slog.Logger
	tracer trace.Tracer
	// metrics is nil unless WithMetrics; stats is always kept.
	metrics *metrics
	stats   *callstats.Set
	// id names the worker in discovery and Status; host is its host name.
	id, host string

	// ctx is the parent of every handler's context. It is not tied to any
	// one call: Shutdown cancels it only once the drain has run out of time,
	// so that handlers still running are told to stop then and not before.
	ctx    context.Context
	cancel context.CancelFunc
	// runners run the handlers, and the waits of an aggregator for the
	// calls it hands to TryInvoke ([Runtime.Go]), on goroutines that
	// outlive a call; they exit when ctx ends.
	runners *runners

	mu     sync.Mutex
	routes []*route // in registration order
	// exact holds the routes of plain method names (no '*' or '>') and
	// patterns those of wildcard patterns, so that a local call finds its
	// route by name and matches only the patterns.
	exact    map[string]*route
	patterns []*route
	started  bool
	closed   bool
	// locals lists the calls [Runtime.StartLocal] started whose handlers
	// still run, linked by [localRun.next].
	locals *localRun

	// inflight counts calls between taking a concurrency slot and sending
	// their reply. Once draining is set no new call can start, and the
	// call that brings inflight to zero closes idle.
	inflight atomic.Int64
	draining atomic.Bool
	idle     chan struct{}
	idleOnce sync.Once

	// calls maps the bus call id of every call being served to its
	// attempts held here (a call published again may reach this runtime
	// twice), linked by [held.next], for cancel messages; cancelSub
	// receives them.
	callsMu   sync.Mutex
	calls     map[string]*held
	cancelSub *nats.Subscription
	// statusSvc answers `toolbus status` while the runtime runs; nil
	// before Start and with WithoutStatus.
	statusSvc micro.Service
	// early holds, for a while, the call ids whose cancel message came
	// before the call: the two arrive on different subscriptions, whose
	// handlers run concurrently, so a cancel sent right after its call may
	// be handled first.
	early map[string]time.Time
	// probes learns whether anyone still listens for the answers of the
	// calls that asked for heartbeats.
	probes *probes

	// direct is the subject prefix of the calls sent to this runtime
	// alone (rule 10): each route also subscribes under it.
	direct string

	// ads advertises the tools in discovery; nil when it is off.
	ads *advertiser

	// askInbox is the inbox prefix the answers to questions come under
	// (rule 11), or "" when no aggregator would answer there.
	askInbox string
}

// route is one registered pattern and its subscription.
type route struct {
	pattern string
	subject string
	handler Handler
	sem     chan struct{} // one token per running call
	// retrySafe is set by [RetrySafe]: the method may run again after an
	// interrupted job.
	retrySafe bool
	// desc is what discovery advertises of the route.
	desc schema.Descriptor
	// metrics holds the route's series; nil without WithMetrics.
	metrics *routeMetrics
	// span is how the spans of its calls start.
	span spanStart

	// sub and dsub (on the runtime's direct subject, rule 10; nil when
	// NATS refused it) are set under Runtime.mu when the route
	// subscribes; done is closed when both have delivered their last
	// message.
	sub, dsub *nats.Subscription
	done      chan struct{}
}

// defaultConfig is what a runtime is made with before its options.
func defaultConfig() config {
	return config{subjects: bus.DefaultSubjects(), logger: slog.Default(), concurrency: DefaultConcurrency, announce: DefaultAnnounceInterval}
}

// CheckOptions reports the first of opts that [New] would refuse, so
// that a configuration is checked before anything connects or starts.
func CheckOptions(opts ...Option) error {
	_, err := newConfig(opts)
	return err
}

// newConfig returns the config opts make of the defaults, or the first
// refusal.
func newConfig(opts []Option) (config, error) {
	return options.Apply(defaultConfig(), opts)
}

// New returns a runtime that serves calls on nc. The runtime never closes
// nc: the caller owns the connection and closes it after
// [Runtime.Shutdown].
func New(nc *nats.Conn, opts ...Option) (*Runtime, error) {
	if nc == nil {
		return nil, errors.New("worker: nil nats connection")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	var m *metrics
	if cfg.registerer != nil {
		var err error
		if m, err = newMetrics(cfg.registerer); err != nil {
			return nil, err
		}
	}
	// A host name that cannot be read only leaves Status without one.
	host, _ := os.Hostname()
	// The runtime's context spans its whole life rather than any request,
	// so it starts from the background context.
	ctx, cancel := context.WithCancel(context.Background())
	id := nuid.Next()
	rt := &Runtime{
		nc:       nc,
		cfg:      cfg,
		log:      cfg.logger.With("component", "worker"),
		tracer:   newTracer(cfg.tracerProvider),
		metrics:  m,
		stats:    callstats.New(),
		id:       id,
		direct:   cfg.subjects.Direct(id),
		host:     host,
		ctx:      ctx,
		cancel:   cancel,
		idle:     make(chan struct{}),
		runners:  newRunners(ctx.Done()),
		probes:   newProbes(nc),
		askInbox: askInbox(nc),
	}
	if cfg.announce > 0 {
		rt.ads = newAdvertiser(rt)
	}
	return rt, nil
}

// Handle registers h for pattern: a method name such as "math.add", or a
// pattern whose tokens may be '*' (any one token) or, last, '>' (one or more
// tokens). A pattern that overlaps one registered before fails with
// [ErrDuplicate]. Registering after [Runtime.Start] subscribes at once;
// after [Runtime.Shutdown] it fails with [ErrClosed].
func (rt *Runtime) Handle(pattern string, h Handler, opts ...HandleOption) error {
	if h == nil {
		return fmt.Errorf("worker: handle %q: nil handler", pattern)
	}
	hc := handleConfig{concurrency: rt.cfg.concurrency}
	for _, o := range opts {
		if err := o(&hc); err != nil {
			return fmt.Errorf("worker: handle %q: %w", pattern, err)
		}
	}
	subject, err := rt.cfg.subjects.CallPattern(pattern)
	if err != nil {
		return fmt.Errorf("worker: handle %q: %w", pattern, err)
	}
	r := &route{pattern: pattern, subject: subject, handler: h, sem: make(chan struct{}, hc.concurrency), retrySafe: hc.retrySafe,
		desc: descriptor(pattern, h, hc), span: newSpanStart(pattern)}

	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return ErrClosed
	}
	for _, other := range rt.routes {
		if schema.OverlapPatterns(other.pattern, pattern) {
			return fmt.Errorf("worker: handle %q: overlaps %q: %w", pattern, other.pattern, ErrDuplicate)
		}
	}
	// Only a pattern that is served gets series, so that a refused one
	// leaves none behind.
	r.metrics = rt.metrics.forRoute(pattern)
	if rt.started {
		if err := rt.subscribe(r); err != nil {
			return err
		}
		rt.flush()
	}
	rt.routes = append(rt.routes, r)
	if (schema.Descriptor{Name: pattern}).IsPattern() {
		rt.patterns = append(rt.patterns, r)
	} else {
		if rt.exact == nil {
			rt.exact = map[string]*route{}
		}
		rt.exact[pattern] = r
	}
	rt.ads.changed()
	return nil
}

// HandleFunc registers fn for pattern, as [Runtime.Handle] does.
func (rt *Runtime) HandleFunc(pattern string, fn func(ctx context.Context, req *Request) (any, error), opts ...HandleOption) error {
	if fn == nil {
		return fmt.Errorf("worker: handle %q: nil handler", pattern)
	}
	return rt.Handle(pattern, HandlerFunc(fn), opts...)
}

// Methods returns the registered patterns, sorted.
func (rt *Runtime) Methods() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ms := make([]string, len(rt.routes))
	for i, r := range rt.routes {
		ms[i] = r.pattern
	}
	slices.Sort(ms)
	return ms
}

// Start joins the cluster's queue group on the subject of every registered
// method, so that each call reaches one of the workers serving it. It fails
// with [ErrStarted] when called twice and [ErrClosed] after Shutdown; when a
// subscription fails, those already made are removed.
func (rt *Runtime) Start() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return ErrClosed
	}
	if rt.started {
		return ErrStarted
	}
	// Probe replies first, so that the first call is probed too.
	if err := rt.subscribeProbes(); err != nil {
		return fmt.Errorf("worker: subscribe to probe replies: %w", err)
	}
	for i, r := range rt.routes {
		if err := rt.subscribe(r); err != nil {
			for _, prev := range rt.routes[:i] {
				prev.unsubscribe(rt.log)
			}
			rt.unsubscribeProbes()
			return err
		}
	}
	if err := rt.subscribeCancels(); err != nil {
		for _, r := range rt.routes {
			r.unsubscribe(rt.log)
		}
		rt.unsubscribeProbes()
		return fmt.Errorf("worker: subscribe to cancels: %w", err)
	}
	rt.started = true
	rt.flush()
	rt.ads.start()
	if !rt.cfg.noStatus {
		// The status is for operators: a worker that cannot serve it
		// still serves calls.
		svc, err := bus.ServeStatus(rt.nc, rt.cfg.subjects, bus.KindWorker, rt.version(), func() bus.Status { return rt.Status().Summary() })
		if err != nil {
			rt.log.Warn("toolbus status will not list this worker: its status service did not start", "err", err)
		} else {
			rt.statusSvc = svc
		}
	}
	return nil
}

// version is the version the runtime reports.
func (rt *Runtime) version() string {
	if rt.cfg.version != "" {
		return rt.cfg.version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// flush makes sure the server knows of new subscriptions before Start
// returns, so that a call sent right after finds its worker. A connection
// that is down will subscribe when it connects, so it is not waited for,
// and a failure is only logged.
func (rt *Runtime) flush() {
	if !rt.nc.IsConnected() {
		return
	}
	if err := rt.nc.Flush(); err != nil {
		rt.log.Warn("flush after subscribing", "err", err)
	}
}

// Shutdown drains the runtime: it stops taking calls (calls sent afterwards
// find no responders unless another worker serves them), answers the calls it
// has already received, and waits for every running handler to finish and
// reply. When ctx ends first it cancels the handlers' contexts and returns an
// error wrapping ctx.Err() without waiting for them any longer. It does not
// close the NATS connection. Calling Shutdown again waits for the same drain.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	rt.ads.stop()
	rt.mu.Lock()
	if svc := rt.statusSvc; svc != nil {
		// Gone from `toolbus status` before it drains.
		rt.statusSvc = nil
		if err := svc.Stop(); err != nil {
			rt.log.Warn("stop the status service", "err", err)
		}
	}
	if !rt.closed {
		rt.closed = true
		for _, r := range rt.routes {
			if r.sub == nil {
				continue
			}
			// Draining fails only when the subscription or the connection
			// is already closed, and then the subscription's done is
			// closed too.
			if err := bus.DrainSubscription(rt.nc, r.sub); err != nil {
				rt.log.Warn("drain subscription", "subject", r.subject, "err", err)
			}
			if r.dsub != nil {
				if err := bus.DrainSubscription(rt.nc, r.dsub); err != nil {
					rt.log.Warn("drain subscription", "subject", r.dsub.Subject, "err", err)
				}
			}
		}
	}
	routes := slices.Clone(rt.routes)
	rt.mu.Unlock()

	for _, r := range routes {
		if r.done == nil {
			continue
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return rt.abort(ctx)
		}
	}
	// Every subscription has delivered its last message, so no call can
	// start any more.
	rt.draining.Store(true)
	if rt.inflight.Load() == 0 {
		rt.markIdle()
	}
	select {
	case <-rt.idle:
		rt.stopCancels()
		rt.stopProbes()
		rt.cancel()
		return nil
	case <-ctx.Done():
		return rt.abort(ctx)
	}
}

func (rt *Runtime) abort(ctx context.Context) error {
	rt.stopCancels()
	rt.stopProbes()
	rt.cancel()
	rt.answerLocals()
	return fmt.Errorf("worker: shutdown: %d calls still running: %w", rt.inflight.Load(), ctx.Err())
}

func (rt *Runtime) markIdle() {
	rt.idleOnce.Do(func() { close(rt.idle) })
}
