package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/sony/gobreaker/v2"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/options"
	"github.com/toolbus/toolbus/schema"
)

// Aggregator dispatches calls over NATS. It is safe for concurrent use; one
// Aggregator serves every request of an ingress.
type Aggregator struct {
	nc             *nats.Conn
	subjects       bus.Subjects
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	methodTimeouts map[string]time.Duration
	batchCap       int
	caps           *caps
	callers        *callerSlots
	log            *slog.Logger
	callLevel      slog.Level // of the per-call "call" line

	// table holds the calls in flight on the bus; every reply and
	// progress message of the aggregator arrives on its one wildcard
	// subscription.
	table             *table
	retrySafePatterns []string
	retrySafeFunc     func(method string) bool
	idem              *IdempotencyStore
	idemQuota         *idemLedger
	idemFailOpen      bool
	breakers          *breakers
	// local runs calls in this process when it can; nil without
	// [WithLocal]. starter, when the Local starts calls and answers them
	// later ([LocalStarter]), starts those that report no progress;
	// localGo, when it lends goroutines ([LocalGoroutines]), is where the
	// aggregator waits for the others.
	local   Local
	starter LocalStarter
	localGo LocalGoroutines
}

// recheck is how often a call due to be published again while NATS is
// away looks whether the connection is back.
const recheck = 50 * time.Millisecond

// defaultConfig is what an aggregator is made with before its options.
func defaultConfig() config {
	return config{
		subjects:       bus.DefaultSubjects(),
		defaultTimeout: DefaultTimeout,
		maxTimeout:     DefaultMaxTimeout,
		batchCap:       DefaultBatchConcurrency,
		maxInFlight:    DefaultMaxInFlight,
		log:            slog.Default(),
		heartbeat:      DefaultHeartbeat,
		misses:         DefaultHeartbeatMisses,
		ackTimeout:     DefaultAckTimeout,
		ackDelay:       DefaultAckDelay,
		maxAttempts:    DefaultMaxAttempts,
		busyWait:       DefaultBusyWait,
		idemRecords:    DefaultIdempotencyCallerMaxRecords,
		idemBytes:      DefaultIdempotencyCallerMaxBytes,
	}
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

// New returns an aggregator that publishes on nc.
func New(nc *nats.Conn, opts ...Option) (*Aggregator, error) {
	if nc == nil {
		return nil, errors.New("aggregator: nil connection")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	subjects := cfg.subjects
	log := cfg.log.With("component", "aggregator")
	var brk *breakers
	if cfg.breaker != nil {
		brk = &breakers{cfg: *cfg.breaker, by: map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]{}}
	}
	cs := newCaps(cfg)
	starter, _ := cfg.local.(LocalStarter)
	localGo, _ := cfg.local.(LocalGoroutines)
	a := &Aggregator{
		starter:           starter,
		localGo:           localGo,
		retrySafePatterns: cfg.retrySafe,
		retrySafeFunc:     cfg.retrySafeFunc,
		idem:              cfg.idem,
		idemQuota:         newIdemLedger(cfg.idemRecords, cfg.idemBytes),
		idemFailOpen:      cfg.idemFailOpen,
		breakers:          brk,
		local:             cfg.local,
		nc:                nc,
		subjects:          subjects,
		defaultTimeout:    cfg.defaultTimeout,
		maxTimeout:        cfg.maxTimeout,
		methodTimeouts:    cfg.methodTimeouts,
		batchCap:          cfg.batchCap,
		caps:              cs,
		callers:           cs.callers,
		log:               log,
		callLevel:         accessLevel(cfg.accessLog),
	}
	liveness := cfg.heartbeat > 0
	var ackDelay time.Duration
	if liveness {
		// Held back no longer than half the ack timeout and half the
		// heartbeat interval, so that an ack held back is never mistaken
		// for a missing one.
		if d := min(cfg.ackDelay, cfg.ackTimeout/2, cfg.heartbeat/2); d >= time.Millisecond {
			ackDelay = d.Truncate(time.Millisecond)
		}
	}
	p := policy{liveness: liveness, silence: time.Duration(cfg.misses) * cfg.heartbeat, ackTimeout: cfg.ackTimeout,
		ackDelay: ackDelay, maxAttempts: cfg.maxAttempts, busyWait: cfg.busyWait, hedge: cfg.hedge, recheck: recheck}
	if !liveness {
		p.maxAttempts = 1
	}
	t := newTable(replyName(nc, cfg.replyPrefix), subjects, p, natsWire{a}, log, a.settled)
	if liveness {
		t.heartbeatHeader = []string{strconv.FormatInt(cfg.heartbeat.Milliseconds(), 10)}
		t.missesHeader = []string{strconv.Itoa(cfg.misses)}
	}
	timer := time.AfterFunc(time.Hour, t.tick)
	timer.Stop()
	t.arm = func(d time.Duration) { timer.Reset(d) }
	sub, err := nc.Subscribe(t.prefix+"*", t.deliver)
	if err != nil {
		return nil, fmt.Errorf("aggregator: subscribe to replies: %w", err)
	}
	// A burst of replies must never be dropped by the client for being
	// slow; the handler hands each on at once.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("aggregator: reply subscription: %w", err)
	}
	a.table = t
	return a, nil
}

// replyName is the fixed beginning of an aggregator's reply subjects:
// replyPrefix when set (a gateway sets "<prefix>.reply" for its calls and
// "<prefix>.jobs.reply" for its job runner's, which the workers' grants
// let them publish on), otherwise the connection's inbox prefix
// ("_INBOX" unless the connection says otherwise), which NATS's
// allow_responses lets the worker given a call answer on.
func replyName(nc *nats.Conn, replyPrefix string) string {
	if replyPrefix != "" {
		return replyPrefix
	}
	inbox := nc.NewInbox()
	return inbox[:strings.LastIndexByte(inbox, '.')]
}

// Timeout returns the deadline a call of method gets when the client asked
// for requested (zero: nothing asked): the smallest of the request, the
// method's timeout (the default when it has none) and the server maximum.
func (a *Aggregator) Timeout(method string, requested time.Duration) time.Duration {
	d := a.defaultTimeout
	if m, ok := a.methodTimeouts[method]; ok {
		d = m
	}
	if requested > 0 && requested < d {
		d = requested
	}
	return min(d, a.maxTimeout)
}

// batch is the calls of one [Aggregator.Dispatch]: it counts those not
// yet answered, and hands out the slots of its concurrency.
type batch struct {
	ctx   context.Context
	start time.Time
	calls []call

	mu      sync.Mutex
	emit    func(i int, r schema.Response)
	open    int     // calls not yet answered
	running int     // calls holding a slot
	waiting []*call // calls waiting for a slot, first come first
	done    chan struct{}
}

// Dispatch implements [schema.Dispatcher]: it runs every call
// concurrently, each under its own deadline, and hands each answer to emit
// as soon as it exists, in completion order, with the index of its call.
// Notifications get no answer: nobody waits for them. emit is called from
// one goroutine at a time and never after Dispatch returns. Dispatch
// returns when every other call has a result or an error, at the latest at
// the largest deadline among them; when ctx ends first, the calls still
// open are answered [schema.CodeCanceled].
//
// A call waiting on the bus takes no goroutine: it is an entry of the
// aggregator's table, moved by the messages on its reply subject and by
// one timer, and answered from there.
func (a *Aggregator) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	b := &batch{ctx: ctx, start: time.Now(), emit: emit, calls: make([]call, len(calls))}
	for i := range calls {
		c := &calls[i]
		if c.IsNotification() {
			a.notify(c, b.start)
			b.calls[i].state = answered
			continue
		}
		b.open++
	}
	if b.open == 0 {
		return
	}
	b.done = make(chan struct{})
	stop := context.AfterFunc(ctx, func() { a.table.cancel(b) })
	defer stop()
	ctxDeadline, bounded := ctx.Deadline()
	for i := range calls {
		c := &calls[i]
		if c.IsNotification() {
			continue
		}
		cl := &b.calls[i]
		cl.c, cl.b, cl.i, cl.method, cl.index = c, b, int32(i), c.Method, -1
		cl.timeout = a.Timeout(c.Method, c.Timeout)
		// A context's sooner deadline is taken as the time left from the
		// batch's start, as the call's own is: one read off the wire,
		// with no monotonic reading, then counts on the monotonic clock
		// as the table's readings of time.Now do, and is shown to the
		// worker with its own wall reading ([call.deadlineTime]).
		left := cl.timeout
		if bounded {
			left = min(left, ctxDeadline.Sub(b.start))
		}
		cl.deadline = momentOf(b.start.Add(left))
		a.begin(cl)
	}
	<-b.done
}

// begin runs cl up to its admission: the checks that need no slot, then
// its batch's concurrency.
func (a *Aggregator) begin(cl *call) {
	if a.local == nil && !a.nc.IsConnected() {
		// Published now, the call would wait in the connection's
		// reconnect buffer until its deadline. Nothing has run, so it
		// is answered at once, before the breaker counts it against
		// the method or an idempotency record is asked for.
		a.table.answerOutside(cl, nil, busDisconnected(a.nc, cl.method))
		return
	}
	if a.idem != nil && cl.c.IdempotencyKey != "" {
		kv, waiting := a.idem.bucket()
		if kv == nil {
			a.table.answerOutside(cl, nil, storeNotOpen(waiting))
			return
		}
		// The record's reads and writes block: the call keeps a
		// goroutine, which waits for its answer from the table.
		go a.keyed(cl, kv)
		return
	}
	if a.breakers != nil {
		done, refused := a.breakers.allow(cl.method)
		if refused != nil {
			a.table.answerOutside(cl, nil, refused)
			return
		}
		cl.brk = done
	}
	a.seat(cl)
}

// seat gives cl a slot of its batch and admits it, or has it wait for
// one under its deadline.
func (a *Aggregator) seat(cl *call) {
	b := cl.b
	b.mu.Lock()
	if b.running >= a.batchCap {
		b.waiting = append(b.waiting, cl)
		a.table.enqueue(cl)
		b.mu.Unlock()
		return
	}
	b.running++
	cl.slot = true
	b.mu.Unlock()
	a.admit(cl)
}

// admit checks cl against the in-flight caps and sends it to the Local
// or over the bus.
func (a *Aggregator) admit(cl *call) {
	// A name no worker may serve is refused before it holds a slot or
	// reaches the Local, as it would be on the bus.
	if err := schema.CheckCallable(cl.method); err != nil {
		a.table.answerOutside(cl, nil, schema.ErrorFrom(err))
		return
	}
	if e := a.caps.take(cl.c, &cl.held); e != nil {
		a.table.answerOutside(cl, nil, e)
		return
	}
	// A call its caller can be asked on goes over the bus, where the
	// question and its sealed answer travel: a local call cannot be asked.
	if a.local != nil && cl.c.Ask == nil {
		if a.starter != nil && cl.c.Progress == nil {
			a.startLocal(cl)
			return
		}
		// TryInvoke blocks while the handler runs: the call has a
		// goroutine while it is local, and leaves it for the bus.
		if a.localGo != nil {
			a.localGo.Go(func() { a.tryLocal(cl) })
		} else {
			go a.tryLocal(cl)
		}
		return
	}
	a.publish(cl)
}

// startLocal starts cl on the Local, in the table under its deadline,
// and sends it over the bus when the Local does not take it. The
// handler's answer comes back to the table from the goroutine that ran
// it.
func (a *Aggregator) startLocal(cl *call) {
	if !a.table.enterLocal(cl) {
		return
	}
	stop, ok := a.starter.StartLocal(cl.c, cl.deadlineTime(), func(result json.RawMessage, e *schema.Error) {
		a.table.answerLocal(cl, result, e)
	})
	if !ok {
		if a.table.leaveLocal(cl) {
			a.publish(cl)
		}
		return
	}
	a.table.localStarted(cl, stop)
}

// tryLocal offers cl to the Local, and sends it over the bus when the
// Local does not take it.
func (a *Aggregator) tryLocal(cl *call) {
	ctx, cancel := context.WithDeadline(cl.b.ctx, cl.deadlineTime())
	result, e, ok := a.local.TryInvoke(ctx, cl.c)
	if ok && e != nil && ctx.Err() != nil {
		// Answered as the bus path answers a call whose context ended:
		// the aggregator's own timeout, or a cancel.
		e = ctxError(ctx, cl.method, cl.timeout)
	}
	cancel()
	if ok {
		a.table.answerOutside(cl, result, e)
		return
	}
	a.publish(cl)
}

// publish builds cl's message and starts it in the table. The subject
// is made here, not on admission, so that a call the Local answers never
// needs one; admit has checked the method already.
func (a *Aggregator) publish(cl *call) {
	subject, err := a.subjects.Call(cl.method)
	if err != nil {
		a.table.answerOutside(cl, nil, schema.ErrorFrom(err))
		return
	}
	if !a.nc.IsConnected() {
		// A call a local handler did not take, or one that waited for
		// a slot while the connection dropped.
		a.table.answerOutside(cl, nil, busDisconnected(a.nc, cl.method))
		return
	}
	c := cl.c
	data, err := schema.MarshalCall(&schema.CallEnvelope{ID: c.ID, Method: c.Method, Params: c.Params, Caller: c.Caller})
	if err != nil {
		a.table.answerOutside(cl, nil, schema.Errorf(schema.CodeInternal, "internal error: encode call: %v", err))
		return
	}
	cl.callID = nuid.Next()
	if a.table.policy.liveness {
		cl.safe = a.retrySafe(c.Method)
		if c.Ask != nil {
			a.allowAsk(cl)
		}
	}
	a.table.start(cl, subject, data)
}

// keyed runs cl, a call with an idempotency key, through its
// record in kv, and answers it.
func (a *Aggregator) keyed(cl *call, kv jetstream.KeyValue) {
	ctx, cancel := context.WithDeadline(cl.b.ctx, cl.deadlineTime())
	defer cancel()
	cl.result, cl.err = a.idempotent(ctx, cl.c, kv, idemKey(cl.c), cl.timeout, func() ([]byte, *schema.Error) {
		if a.breakers != nil {
			done, refused := a.breakers.allow(cl.method)
			if refused != nil {
				return nil, refused
			}
			cl.brk = done
		}
		cl.sync = make(chan struct{})
		a.seat(cl)
		<-cl.sync
		return cl.result, cl.err
	})
	a.respond(cl)
}

// settled gives back what cl held, once it is answered, and answers its
// batch, or wakes the goroutine that waits for it.
func (a *Aggregator) settled(cl *call) {
	a.caps.give(&cl.held)
	if cl.brk != nil {
		cl.brk(cl.err)
		cl.brk = nil
	}
	if cl.slot {
		cl.slot = false
		a.unseat(cl.b)
	}
	if cl.sync != nil {
		close(cl.sync)
		return
	}
	a.respond(cl)
}

// unseat gives back a slot of b, to the first call that waits for one
// and still can use it.
func (a *Aggregator) unseat(b *batch) {
	b.mu.Lock()
	b.running--
	var next *call
	for len(b.waiting) > 0 && next == nil {
		cl := b.waiting[0]
		b.waiting = b.waiting[1:]
		if a.table.dequeue(cl) {
			next = cl
			b.running++
			cl.slot = true
		}
	}
	b.mu.Unlock()
	if next != nil {
		a.admit(next)
	}
}

// respond hands cl's answer to its batch.
func (a *Aggregator) respond(cl *call) {
	e := cl.err
	if e != nil && e.Code == schema.CodeTimeout && e.Reason() == schema.ReasonDeadlineInWorker {
		// The worker stopped the handler at the deadline and said so
		// before the aggregator's own timer did: one timeout, one message.
		e = timedOut(cl.method, cl.timeout, schema.ReasonDeadlineInWorker)
	}
	b := cl.b
	a.logCall(b.ctx, cl.c, time.Since(b.start), e)
	r := schema.Response{ID: cl.c.ID}
	if e != nil {
		r.Error = e
	} else {
		r.Result = cl.result
	}
	b.mu.Lock()
	b.emit(int(cl.i), r)
	b.open--
	last := b.open == 0
	b.mu.Unlock()
	if last {
		close(b.done)
	}
}

// natsWire is the table's [wire] on the aggregator's connection.
type natsWire struct{ a *Aggregator }

var _ wire = natsWire{}

func (w natsWire) publish(m *nats.Msg, method string) *schema.Error {
	nc := w.a.nc
	if !nc.IsConnected() {
		return busDisconnected(nc, method)
	}
	if err := nc.PublishMsg(m); err != nil {
		return w.a.publishError(method, err)
	}
	return nil
}

// cancel tells the workers that the client gave up on a call, so the one
// running it cancels its handler. A call past its deadline needs no
// message: the worker holds the same deadline.
func (w natsWire) cancel(callID string) {
	if err := w.a.nc.Publish(w.a.subjects.Cancel(), []byte(callID)); err != nil {
		w.a.log.Debug("cancel not published", "err", err)
	}
}

// publishError maps a failed publication of a call of method to the
// call's answer.
func (a *Aggregator) publishError(method string, err error) *schema.Error {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return schema.LimitError("max_payload", a.nc.MaxPayload(), -1)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting),
		// The connection dropped between the check of its state and
		// the publication, and what waits for it fills the buffer.
		errors.Is(err, nats.ErrReconnectBufExceeded),
		// A connection that has never reached a server does not know yet
		// that it supports headers.
		errors.Is(err, nats.ErrHeadersNotSupported) && !a.nc.IsConnected():
		return busDisconnected(a.nc, method)
	}
	return schema.NewError(schema.CodeInternal, "internal error: publish call: "+err.Error(),
		map[string]any{"method": method})
}

// notify publishes a notification and does not wait. A notification has no
// answer, so what fails is only logged.
func (a *Aggregator) notify(c *schema.Call, start time.Time) {
	subject, err := a.subjects.Call(c.Method)
	if err != nil {
		a.log.Debug("notification dropped", "method", c.Method, "err", err)
		return
	}
	timeout := a.Timeout(c.Method, c.Timeout)
	msg, err := bus.CallMsg(subject, &schema.CallEnvelope{Method: c.Method, Params: c.Params, Caller: c.Caller}, start.Add(timeout), c.TraceParent)
	if err == nil {
		err = a.nc.PublishMsg(msg)
	}
	if err != nil {
		a.log.Warn("notification not published", "method", c.Method, "err", err)
	}
}

func (a *Aggregator) logCall(ctx context.Context, c *schema.Call, d time.Duration, err *schema.Error) {
	if !a.log.Enabled(ctx, a.callLevel) {
		return
	}
	code := 0
	outcome := "ok"
	if err != nil {
		code = err.Code
		outcome = "error"
	}
	a.log.LogAttrs(ctx, a.callLevel, "call",
		slog.String("id", string(c.ID)),
		slog.String("method", c.Method),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("outcome", outcome),
		slog.Int("code", code))
}

// accessLevel is the level of the per-call line: Info with the access log
// on, Debug without.
func accessLevel(on bool) slog.Level {
	if on {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// RetrySafe reports whether calls of method may run more than once: it
// matches a pattern of [WithRetrySafe], or the test of
// [WithRetrySafeFunc] says so.
func (a *Aggregator) RetrySafe(method string) bool { return a.retrySafe(method) }

// retrySafe reports whether calls of method may run more than once.
func (a *Aggregator) retrySafe(method string) bool {
	for _, p := range a.retrySafePatterns {
		if schema.MatchMethod(p, method) {
			return true
		}
	}
	return a.retrySafeFunc != nil && a.retrySafeFunc(method)
}
