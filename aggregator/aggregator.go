package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/sony/gobreaker/v2"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/latest"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of [New].
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxTimeout       = 5 * time.Minute
	DefaultBatchConcurrency = 256
	DefaultMaxInFlight      = 10000
	// overloadRetryAfter is the wait an overloaded aggregator suggests.
	overloadRetryAfter = 100 * time.Millisecond
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
	inFlight       chan struct{}
	callers        *callerSlots
	log            *slog.Logger
	callLevel      slog.Level // of the per-call "call" line
	now            func() time.Time

	// inbox receives replies and progress messages; nil when liveness is
	// off, and calls then wait on NATS requests of their own.
	inbox       *inbox
	heartbeat   time.Duration
	misses      int
	ackTimeout  time.Duration
	maxAttempts int
	// heartbeatHeader, missesHeader and ackDelayHeader are the values of
	// the liveness headers every call carries; ackDelayHeader is empty
	// when workers must acknowledge at once.
	heartbeatHeader, missesHeader, ackDelayHeader string
	retrySafePatterns                             []string
	retrySafeFunc                                 func(method string) bool
	methodInFlight                                map[string]chan struct{}
	idem                                          *IdempotencyStore
	idemQuota                                     *idemLedger
	idemFailOpen                                  bool
	breakers                                      *breakers
	hedge                                         time.Duration
	busyWait                                      time.Duration
	// local runs calls in this process when it can; nil without
	// [WithLocal].
	local Local
}

type config struct {
	prefix         string
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	methodTimeouts map[string]time.Duration
	batchCap       int
	maxInFlight    int
	log            *slog.Logger
	accessLog      bool

	callerMaxInFlight int

	heartbeat      time.Duration
	misses         int
	ackTimeout     time.Duration
	ackDelay       time.Duration
	maxAttempts    int
	retrySafe      []string
	retrySafeFunc  func(method string) bool
	methodInFlight map[string]int
	idem           *IdempotencyStore
	idemRecords    int
	idemBytes      int64
	idemFailOpen   bool
	breaker        *Breaker
	hedge          time.Duration
	busyWait       time.Duration
	replyPrefix    string
	local          Local
}

// Option configures [New].
type Option func(*config) error

// WithPrefix sets the subject prefix (default [bus.DefaultPrefix]).
func WithPrefix(prefix string) Option {
	return func(c *config) error { c.prefix = prefix; return nil }
}

// WithDefaultTimeout sets the deadline of a method with no timeout of its own
// (default [DefaultTimeout]).
func WithDefaultTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: default timeout must be positive, got %v", d)
		}
		c.defaultTimeout = d
		return nil
	}
}

// WithMaxTimeout sets the server maximum: no call waits longer, whatever the
// client or the method asks (default [DefaultMaxTimeout]).
func WithMaxTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("aggregator: max timeout must be positive, got %v", d)
		}
		c.maxTimeout = d
		return nil
	}
}

// WithMethodTimeout sets the timeout of one method, in place of the default.
func WithMethodTimeout(method string, d time.Duration) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(method); err != nil {
			return fmt.Errorf("aggregator: method timeout for %q: %w", method, err)
		}
		if d <= 0 {
			return fmt.Errorf("aggregator: timeout of %s must be positive, got %v", method, d)
		}
		if c.methodTimeouts == nil {
			c.methodTimeouts = map[string]time.Duration{}
		}
		c.methodTimeouts[method] = d
		return nil
	}
}

// WithBatchConcurrency caps the calls of one batch that are in flight at once
// (default [DefaultBatchConcurrency]); the others wait for a slot, still
// under their own deadlines.
func WithBatchConcurrency(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("aggregator: batch concurrency must be positive, got %d", n)
		}
		c.batchCap = n
		return nil
	}
}

// WithMaxInFlight caps the calls in flight across all batches of this
// aggregator (default [DefaultMaxInFlight]). A call over the cap is refused at
// once with [schema.CodeOverloaded] and a retry_after_ms hint. Each named
// caller may take a share of it ([WithCallerMaxInFlight]).
func WithMaxInFlight(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("aggregator: max in-flight must be positive, got %d", n)
		}
		c.maxInFlight = n
		return nil
	}
}

// WithReplyPrefix makes the reply subjects of the calls
// "<prefix>.<id>.<token>" in place of the connection's inbox ("_INBOX..."),
// so that NATS permissions can let workers answer them for longer than
// the calls of an ingress usually last, as the job runner's calls need
// ([bus.Subjects.JobReplies]). Default: the connection's inbox. It needs
// liveness ([WithHeartbeat]), which the calls' shared inbox comes with.
//
// NATS cannot tell which worker may answer on such a subject, as it does
// with allow_responses on an inbox: only the subject being unguessable
// keeps other workers from answering there. So <id>, made once, and
// <token>, made for each call, are each a [bus.ReplyToken] (128 bits from
// crypto/rand), which only the worker given the call learns.
func WithReplyPrefix(prefix string) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(prefix); err != nil {
			return fmt.Errorf("aggregator: reply prefix: %w", err)
		}
		c.replyPrefix = prefix
		return nil
	}
}

// WithLogger sets the logger of the per-call log lines (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("aggregator: nil logger")
		}
		c.log = l
		return nil
	}
}

// WithAccessLog writes the per-call "call" line (id, method, duration,
// outcome, code) at level Info when on; when off, the default, it is
// written at level Debug, so that nothing is logged per call at the default
// level on the hot path. A line costs about as much as the call's own
// bookkeeping: see BENCHMARKS.md.
func WithAccessLog(on bool) Option {
	return func(c *config) error {
		c.accessLog = on
		return nil
	}
}

// New returns an aggregator that publishes on nc.
func New(nc *nats.Conn, opts ...Option) (*Aggregator, error) {
	if nc == nil {
		return nil, errors.New("aggregator: nil connection")
	}
	cfg := config{
		prefix:         bus.DefaultPrefix,
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
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	subjects, err := bus.NewSubjects(cfg.prefix)
	if err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	ackDelayHeader := ""
	// Held back no longer than half the ack timeout and half the
	// heartbeat interval, so that an ack held back is never mistaken for
	// a missing one.
	if d := min(cfg.ackDelay, cfg.ackTimeout/2, cfg.heartbeat/2); cfg.heartbeat > 0 && d >= time.Millisecond {
		ackDelayHeader = strconv.FormatInt(d.Milliseconds(), 10)
	}
	log := cfg.log.With("component", "aggregator")
	var in *inbox
	if cfg.heartbeat > 0 {
		if in, err = newInbox(nc, replyName(nc, cfg.replyPrefix), subjects, log); err != nil {
			return nil, err
		}
	}
	var brk *breakers
	if cfg.breaker != nil {
		brk = &breakers{cfg: *cfg.breaker, by: map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]{}}
	}
	methodInFlight := map[string]chan struct{}{}
	for m, n := range cfg.methodInFlight {
		methodInFlight[m] = make(chan struct{}, n)
	}
	return &Aggregator{
		inbox:             in,
		heartbeat:         cfg.heartbeat,
		misses:            cfg.misses,
		ackTimeout:        cfg.ackTimeout,
		maxAttempts:       cfg.maxAttempts,
		heartbeatHeader:   strconv.FormatInt(cfg.heartbeat.Milliseconds(), 10),
		missesHeader:      strconv.Itoa(cfg.misses),
		ackDelayHeader:    ackDelayHeader,
		retrySafePatterns: cfg.retrySafe,
		retrySafeFunc:     cfg.retrySafeFunc,
		methodInFlight:    methodInFlight,
		idem:              cfg.idem,
		idemQuota:         newIdemLedger(cfg.idemRecords, cfg.idemBytes),
		idemFailOpen:      cfg.idemFailOpen,
		breakers:          brk,
		hedge:             cfg.hedge,
		busyWait:          cfg.busyWait,
		local:             cfg.local,
		nc:                nc,
		subjects:          subjects,
		defaultTimeout:    cfg.defaultTimeout,
		maxTimeout:        cfg.maxTimeout,
		methodTimeouts:    cfg.methodTimeouts,
		batchCap:          cfg.batchCap,
		inFlight:          make(chan struct{}, cfg.maxInFlight),
		callers:           newCallerSlots(callerShare(cfg)),
		log:               log,
		callLevel:         accessLevel(cfg.accessLog),
		now:               time.Now,
	}, nil
}

// replyName is the fixed beginning of an aggregator's reply subjects:
// replyPrefix when set, otherwise the connection's inbox prefix ("_INBOX"
// unless the connection says otherwise).
func replyName(nc *nats.Conn, replyPrefix string) string {
	if replyPrefix != "" {
		return replyPrefix
	}
	inbox := nc.NewInbox()
	return inbox[:strings.LastIndexByte(inbox, '.')]
}

// Local runs calls in the aggregator's own process, beside the bus: a
// [worker.Runtime] in the same process is one.
type Local interface {
	// TryInvoke runs call when it can take it at once and returns its
	// answer with ok set, or returns ok false having run nothing. It
	// returns by the time ctx ends.
	TryInvoke(ctx context.Context, call *schema.Call) (result json.RawMessage, err *schema.Error, ok bool)
}

// WithLocal makes the aggregator hand each call to l before the bus: a call
// l takes is answered by l, without a bus message; a call l cannot take
// now (no handler of its method there, or none free) goes over the bus as
// usual. Everything the aggregator checks before publishing a call (the
// caller's, the ingress's and the method's in-flight limits, the batch's
// concurrency, the circuit breaker, the idempotency record) it checks for
// a local call too, and its deadline is the same. The bus's liveness
// protocol has nothing to watch in one process: a local call ends at its
// deadline or when its client leaves.
func WithLocal(l Local) Option {
	return func(c *config) error {
		c.local = l
		return nil
	}
}

// callerShare is the in-flight cap of one named caller: as configured, or
// half of the global cap.
func callerShare(cfg config) int {
	if cfg.callerMaxInFlight > 0 {
		return min(cfg.callerMaxInFlight, cfg.maxInFlight)
	}
	return max(cfg.maxInFlight/2, 1)
}

// MaxTimeout returns the server maximum deadline of a call.
func (a *Aggregator) MaxTimeout() time.Duration { return a.maxTimeout }

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

// Dispatch implements [schema.Dispatcher]: it runs every call
// concurrently, each under its own deadline, and hands each answer to emit
// as soon as it exists, in completion order, with the index of its call.
// Notifications get no answer: nobody waits for them. emit is called from
// one goroutine at a time and never after Dispatch returns. Dispatch
// returns when every other call has a result or an error, at the latest at
// the largest deadline among them; when ctx ends first, the calls still
// open are answered [schema.CodeCanceled].
func (a *Aggregator) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	start := a.now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	batchSlots := make(chan struct{}, a.batchCap)
	run := func(i int) {
		r := a.call(ctx, &calls[i], start, batchSlots)
		mu.Lock()
		emit(i, r)
		mu.Unlock()
	}
	// The last call runs on this goroutine: a single call, the most common
	// message, then costs no goroutine switch.
	last := -1
	for i := range calls {
		c := &calls[i]
		if c.IsNotification() {
			a.notify(c, start)
			continue
		}
		if last >= 0 {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				run(i)
			}(last)
		}
		last = i
	}
	if last >= 0 {
		run(last)
	}
	wg.Wait()
}

// call runs one call and always returns a response for it.
func (a *Aggregator) call(ctx context.Context, c *schema.Call, start time.Time, batchSlots chan struct{}) schema.Response {
	timeout := a.Timeout(c.Method, c.Timeout)
	ctx, cancel := context.WithDeadline(ctx, start.Add(timeout))
	defer cancel()
	resp := schema.Response{ID: c.ID}
	if a.local == nil && !a.nc.IsConnected() {
		// Published now, the call would wait in the connection's
		// reconnect buffer until its deadline. Nothing has run, so it
		// is answered at once, before the breaker counts it against
		// the method or an idempotency record is asked for.
		resp.Error = busDisconnected(a.nc, c.Method)
		a.logCall(ctx, c, a.now().Sub(start), resp.Error)
		return resp
	}
	run := func() ([]byte, *schema.Error) { return a.roundTrip(ctx, c, timeout, batchSlots) }
	if a.breakers != nil {
		direct := run
		run = func() ([]byte, *schema.Error) { return a.breakers.call(c.Method, direct) }
	}
	var result []byte
	var err *schema.Error
	if a.idem != nil && c.IdempotencyKey != "" && !c.IsNotification() {
		if kv, waiting := a.idem.bucket(); kv != nil {
			result, err = a.idempotent(ctx, c, kv, idemKey(c), timeout, run)
		} else {
			err = storeNotOpen(waiting)
		}
	} else {
		result, err = run()
	}
	if err != nil && err.Code == schema.CodeTimeout && err.Reason() == schema.ReasonDeadlineInWorker {
		// The worker stopped the handler at the deadline and said so
		// before the aggregator's own timer did: one timeout, one message.
		err = timedOut(c.Method, timeout, schema.ReasonDeadlineInWorker)
	}
	if err != nil {
		resp.Error = err
	} else {
		resp.Result = result
	}
	a.logCall(ctx, c, a.now().Sub(start), resp.Error)
	return resp
}

func (a *Aggregator) roundTrip(ctx context.Context, c *schema.Call, timeout time.Duration, batchSlots chan struct{}) ([]byte, *schema.Error) {
	subject, err := a.subjects.Call(c.Method)
	if err != nil {
		return nil, schema.ErrorFrom(err)
	}
	select {
	case batchSlots <- struct{}{}:
		defer func() { <-batchSlots }()
	case <-ctx.Done():
		return nil, a.ctxError(ctx, c, timeout)
	}
	if c.Caller != "" {
		if !a.callers.take(c.Caller) {
			return nil, callerOverloaded(a.callers.max)
		}
		defer a.callers.give(c.Caller)
	}
	select {
	case a.inFlight <- struct{}{}:
		defer func() { <-a.inFlight }()
	default:
		return nil, schema.NewError(schema.CodeOverloaded,
			fmt.Sprintf("overloaded: %d calls in flight on this ingress (max_in_flight); send the call again shortly", cap(a.inFlight)),
			map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(), "limit": "max_in_flight", "max": cap(a.inFlight)})
	}
	if sem, ok := a.methodInFlight[c.Method]; ok {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		default:
			return nil, schema.NewError(schema.CodeOverloaded,
				fmt.Sprintf("overloaded: %d calls of %s in flight (method_max_in_flight)", cap(sem), c.Method),
				map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(),
					"limit": "method_max_in_flight", "method": c.Method})
		}
	}
	if a.local != nil {
		if result, e, ok := a.local.TryInvoke(ctx, c); ok {
			if e != nil && ctx.Err() != nil {
				// Answered as the bus path answers a call whose context
				// ended: the aggregator's own timeout, or a cancel.
				return nil, a.ctxError(ctx, c, timeout)
			}
			return result, e
		}
	}
	if !a.nc.IsConnected() {
		// A call a local handler did not take, or one that waited for
		// a slot while the connection dropped.
		return nil, busDisconnected(a.nc, c.Method)
	}
	deadline, _ := ctx.Deadline()
	msg, err := bus.CallMsg(subject, &schema.CallEnvelope{ID: c.ID, Method: c.Method, Params: c.Params, Caller: c.Caller}, deadline, c.TraceParent)
	if err != nil {
		return nil, schema.Errorf(schema.CodeInternal, "internal error: encode call: %v", err)
	}
	callID := nuid.Next()
	msg.Header.Set(schema.HeaderCallID, callID)
	if a.inbox != nil {
		return a.exchange(ctx, c, timeout, msg, callID)
	}
	reply, err := a.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			a.cancelCall(c, callID)
		}
		return nil, a.requestError(ctx, c, timeout, err)
	}
	env, err := bus.ReadReply(reply)
	if err != nil {
		if errors.Is(err, bus.ErrNoResponders) {
			return nil, noResponders(c.Method)
		}
		return nil, badReply(c.Method, err)
	}
	if e := env.Err(); e != nil {
		return nil, e
	}
	return env.Result, nil
}

func noResponders(method string) *schema.Error {
	return schema.NewError(schema.CodeMethodNotFound, "method not found: no worker serves "+method,
		map[string]any{"reason": schema.ReasonNoResponders, "method": method})
}

// cancelCall tells the workers that the client gave up on a call, so the one
// running it cancels its handler. A call past its deadline needs no message:
// the worker holds the same deadline.
func (a *Aggregator) cancelCall(c *schema.Call, callID string) {
	if err := a.nc.Publish(a.subjects.Cancel(), []byte(callID)); err != nil {
		a.log.Debug("cancel not published", "method", c.Method, "err", err)
	}
}

// requestError maps a failed NATS request to the error of the call.
func (a *Aggregator) requestError(ctx context.Context, c *schema.Call, timeout time.Duration, err error) *schema.Error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return noResponders(c.Method)
	case ctx.Err() != nil:
		return a.ctxError(ctx, c, timeout)
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
		return busDisconnected(a.nc, c.Method)
	}
	return schema.NewError(schema.CodeInternal, "internal error: publish call: "+err.Error(),
		map[string]any{"method": c.Method})
}

// busRetryAfter is the retry_after_ms of a call refused while NATS is
// away: the first reconnection attempts come sooner.
const busRetryAfter = time.Second

// busDisconnected answers a call that was not published because the
// ingress's NATS connection is not up (reconnecting, or closed): nothing
// ran, so the caller, or the job that made the call, may send it again.
func busDisconnected(nc *nats.Conn, method string) *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: not connected to NATS (the connection is "+
		strings.ToLower(nc.Status().String())+"); send the call again shortly",
		map[string]any{"retryable": true, "retry_after_ms": busRetryAfter.Milliseconds(),
			"reason": schema.ReasonBusDisconnected, "method": method})
}

// ctxError answers a call whose context ended: its own deadline passing is a
// retryable timeout; the caller going away is a cancellation.
func (a *Aggregator) ctxError(ctx context.Context, c *schema.Call, timeout time.Duration) *schema.Error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return timedOut(c.Method, timeout, "")
	}
	return schema.NewError(schema.CodeCanceled, "canceled: the client gave up on "+c.Method+" before it was answered",
		map[string]any{"method": c.Method})
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

// exchange publishes a call on the aggregator's inbox and waits for its
// reply, watching the progress messages of the liveness protocol: a busy
// worker's refusal publishes the call again after a short backoff, for
// another worker; a call whose worker went silent after acknowledging it
// is published again when retry-safe, and otherwise answered -32003 at
// once; a retry-safe call nobody acknowledged is published again after the
// ack timeout. Every attempt shares the reply subject and the bus call id,
// so the first reply of any of them answers the call, and a cancel
// message reaches all of them.
func (a *Aggregator) exchange(ctx context.Context, c *schema.Call, timeout time.Duration, msg *nats.Msg, callID string) ([]byte, *schema.Error) {
	subject, p, asked, closeInbox := a.inbox.open(c.Method, c.Progress != nil)
	defer closeInbox()
	msg.Reply = subject
	msg.Header[schema.HeaderHeartbeat] = []string{a.heartbeatHeader}
	msg.Header[schema.HeaderHeartbeatMisses] = []string{a.missesHeader}
	if a.ackDelayHeader != "" {
		msg.Header[schema.HeaderAckDelay] = []string{a.ackDelayHeader}
	}
	safe := a.retrySafe(c.Method)

	attempts := 0 // publications that may have run the call
	// refused is set while the call waits to be published again after a
	// busy refusal; direct while its latest publication went to one
	// worker's direct subject rather than to the queue group.
	refused, direct := false, false
	var directTo string // the direct subject of the latest publication
	publishDirect := func(to string) *schema.Error {
		d := *msg
		d.Subject = to + "." + c.Method
		if err := a.nc.PublishMsg(&d); err != nil {
			return a.requestError(ctx, c, timeout, err)
		}
		direct, directTo = true, to
		return nil
	}
	// publish sends the call to a slot a reply lately named free, or else
	// to the queue group. Slots are named only while the method's calls
	// ask for them (asked), so only then is there one to look for.
	publish := func() *schema.Error {
		if asked {
			if to, ok := a.inbox.takeFree(c.Method); ok {
				return publishDirect(to)
			}
		}
		direct = false
		if err := a.nc.PublishMsg(msg); err != nil {
			return a.requestError(ctx, c, timeout, err)
		}
		return nil
	}
	if asked {
		// open has marked p as asking, as asked says.
		msg.Header[schema.HeaderNameFree] = nameFree
	}
	if e := publish(); e != nil {
		return nil, e
	}
	attempts++

	// ack fires when a retry-safe call went unacknowledged for the ack
	// timeout; live when an acknowledged call's worker went silent; retry
	// when a refused call is due to be published again. A stopped timer
	// never fires.
	ack := time.NewTimer(a.ackTimeout)
	live := time.NewTimer(time.Hour)
	retry := time.NewTimer(time.Hour)
	hedge := time.NewTimer(time.Hour)
	defer ack.Stop()
	defer live.Stop()
	defer retry.Stop()
	defer hedge.Stop()
	live.Stop()
	retry.Stop()
	hedge.Stop()
	if safe && a.hedge > 0 && attempts < a.maxAttempts {
		hedge.Reset(a.hedge)
	}
	if !safe || attempts >= a.maxAttempts {
		ack.Stop()
	}
	silence := time.Duration(a.misses) * a.heartbeat
	backoff, namedBackoff := busyBackoffMin, busyBackoffMax
	var firstBusy time.Time
	again := func() *schema.Error {
		if e := publish(); e != nil {
			return e
		}
		if safe && attempts < a.maxAttempts {
			ack.Reset(a.ackTimeout)
		}
		return nil
	}
	for {
		select {
		case m := <-p.reply:
			if direct && bus.NoResponders(m) {
				// The worker named by a free slot has gone, or NATS
				// refused its direct subscription: nothing ran, so the
				// queue group has the call again, and the slots that
				// worker names are not believed for a while.
				a.inbox.unheard(directTo)
				if e := publish(); e != nil {
					return nil, e
				}
				continue
			}
			if attempts > 1 {
				// Another attempt may still be running somewhere.
				a.cancelCall(c, callID)
			}
			// A report the worker sent before its reply came first on
			// the inbox, but select may have chosen the reply: hand it
			// on first, so that the last progress is not lost.
			select {
			case r := <-p.report:
				c.Progress(r.Percent, r.Message)
			default:
			}
			return a.readReply(c, m, attempts)
		case v := <-p.progress:
			ack.Stop()
			if isBusy(v) {
				live.Stop()
				now := time.Now()
				if firstBusy.IsZero() {
					firstBusy = now
				}
				// From now on the call's workers name the slots
				// they free.
				asked = true
				p.askedFree.Store(true)
				msg.Header[schema.HeaderNameFree] = nameFree
				if now.Sub(firstBusy) >= a.busyWait {
					return nil, workersBusy(c.Method, a.busyWait)
				}
				// Published again at once to a slot a reply named
				// free, else at the first one a reply names, or
				// after the backoff, whichever comes first.
				if to, ok := a.inbox.takeFree(c.Method); ok {
					if e := publishDirect(to); e != nil {
						return nil, e
					}
					continue
				}
				if !refused {
					refused = true
					a.inbox.refuse(p, firstBusy)
				}
				if v == progressBusyDirect {
					// The workers name their free slots: the backoff
					// is only the fallback, for a slot nobody names.
					retry.Reset(namedBackoff)
					namedBackoff = min(2*namedBackoff, namedFallbackMax)
				} else {
					retry.Reset(backoff)
					backoff = min(2*backoff, busyBackoffMax)
				}
				continue
			}
			live.Reset(silence)
		case to := <-p.direct:
			if !refused {
				// Offered as the backoff ran out: another refused call
				// may take the slot.
				a.inbox.freed(c.Method, to, 1)
				continue
			}
			refused = false
			retry.Stop()
			if e := publishDirect(to); e != nil {
				return nil, e
			}
			if safe && attempts < a.maxAttempts {
				ack.Reset(a.ackTimeout)
			}
		case r := <-p.report:
			c.Progress(r.Percent, r.Message)
		case <-retry.C:
			if refused {
				refused = false
				a.inbox.unrefuse(p)
			}
			if e := again(); e != nil {
				return nil, e
			}
		case <-hedge.C:
			if attempts < a.maxAttempts {
				attempts++
				if e := publish(); e != nil {
					return nil, e
				}
			}
		case <-ack.C:
			if attempts >= a.maxAttempts {
				continue // a hedge took the last attempt
			}
			attempts++
			if e := again(); e != nil {
				return nil, e
			}
			a.log.Info("call not acknowledged, published again", "method", c.Method, "attempt", attempts)
		case <-live.C:
			if len(p.progress) > 0 || len(p.reply) > 0 {
				// The worker spoke while this goroutine waited to run,
				// and select chose among the ready cases at random: a
				// busy aggregator must not blame the worker for its own
				// delay. Read what came first.
				live.Reset(silence)
				continue
			}
			if !safe || attempts >= a.maxAttempts {
				a.log.Warn("worker lost a call", "method", c.Method, "id", string(c.ID), "silence", silence)
				return nil, workerLost(c.Method, silence, attempts)
			}
			attempts++
			if e := again(); e != nil {
				return nil, e
			}
			a.log.Info("worker lost a retry-safe call, published again", "method", c.Method, "attempt", attempts)
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				a.cancelCall(c, callID)
			}
			return nil, a.ctxError(ctx, c, timeout)
		}
	}
}

// readReply turns a reply message into the call's answer.
func (a *Aggregator) readReply(c *schema.Call, m *nats.Msg, attempts int) ([]byte, *schema.Error) {
	env, err := bus.ReadReply(m)
	if err != nil {
		if errors.Is(err, bus.ErrNoResponders) {
			if attempts > 1 {
				// The method had a worker for the first attempt; it is
				// gone now.
				return nil, schema.NewError(schema.CodeUnavailable, "unavailable: no worker left for "+c.Method,
					map[string]any{"retryable": true, "reason": schema.ReasonNoResponders, "method": c.Method, "attempts": attempts})
			}
			return nil, noResponders(c.Method)
		}
		return nil, badReply(c.Method, err)
	}
	if e := env.Err(); e != nil {
		return nil, e
	}
	return env.Result, nil
}

// workersBusy is the answer of a call every worker kept refusing for want
// of room.
func workersBusy(method string, waited time.Duration) *schema.Error {
	return schema.NewError(schema.CodeOverloaded,
		"overloaded: every worker of "+method+" stayed at its concurrency limit for "+waited.String(),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(),
			"reason": schema.ReasonWorkersBusy, "method": method})
}

// workerLost is the answer of a call whose worker stopped sending
// heartbeats: it may have run in part, so only the client can tell whether
// sending it again is safe.
func workerLost(method string, silence time.Duration, attempts int) *schema.Error {
	return schema.NewError(schema.CodeUnavailable,
		"unavailable: the worker running "+method+" stopped answering",
		map[string]any{"retryable": true, "reason": schema.ReasonWorkerLost, "method": method,
			"silence_ms": silence.Milliseconds(), "attempts": attempts, "may_have_run": true})
}

// inbox receives every reply and progress message of one aggregator on one
// wildcard subscription, and hands each to the call waiting for it. A call
// keeps its reply subject across its attempts, so whichever worker answers
// first is heard.
type inbox struct {
	// prefix is name, a [bus.ReplyToken] and a dot: every reply subject
	// is prefix and another ReplyToken.
	prefix   string
	name     string
	subjects bus.Subjects
	sub      *nats.Subscription
	// strays logs the messages that reached no call it remembers, and
	// strayCounters counts them with the late ones.
	strays *strayLog
	strayCounters

	mu      sync.Mutex
	waiting map[string]*pending
	// refused holds, by method, the calls that a busy worker refused and
	// that wait to be published again, oldest first: a reply that says
	// its worker has free slots sends them there (rule 10).
	refused map[string][]*pending
	// pressed holds, by method, when a call was last refused or sent to
	// a slot named free.
	pressedAt map[string]time.Time
	// free holds, by method, the free slots replies named that no
	// refused call took, oldest first: the next calls of the method go
	// there rather than to a random member of the queue group.
	free map[string][]freeSlot
	// deaf holds the direct subjects that a call sent to reached nobody,
	// with when: the slots they name are not believed for deafFor.
	deaf map[string]time.Time
	// ended holds the reply tokens of the calls that ended last, so that
	// a late answer is told from one to a subject never made.
	ended endedTokens
}

// freeSlot is a slot a worker named free at a time.
type freeSlot struct {
	direct string
	at     time.Time
}

// freeSlotTTL is how long a free slot a reply named is believed: after
// it, another call has likely taken it.
const freeSlotTTL = 100 * time.Millisecond

// pending is what one call waits on.
type pending struct {
	// reply holds the first replies; more than fit are dropped, since only
	// the first counts.
	reply chan *nats.Msg
	// progress holds the latest progress value not yet read; an older one
	// not read is replaced, since only the newest matters.
	progress chan string
	// report holds the latest progress report not yet read, replaced in
	// the same way; nil when the call does not want reports.
	report chan schema.JobProgress
	// method is the call's; direct receives the direct subject of a
	// worker with a free slot for it while the call waits after a busy
	// refusal (rule 10).
	method string
	direct chan string
	// since is when a busy worker first refused the call, while it
	// waits in line; guarded by the inbox's mu.
	since time.Time
	// askedFree is set before the call is first published with
	// [schema.HeaderNameFree]: only the replies of a call that asked may
	// name a free slot.
	askedFree atomic.Bool
}

// newInbox subscribes to the reply subjects "<name>.<id>.<token>" of
// one aggregator, where id is made here and token for each call, both
// [bus.ReplyToken]s: a worker that may publish on them learns a reply
// subject only from a call it received.
func newInbox(nc *nats.Conn, name string, subjects bus.Subjects, log *slog.Logger) (*inbox, error) {
	in := makeInbox(name, subjects, log)
	sub, err := nc.Subscribe(in.prefix+"*", in.deliver)
	if err != nil {
		return nil, fmt.Errorf("aggregator: subscribe to replies: %w", err)
	}
	// A burst of replies must never be dropped by the client for being
	// slow; the handler only hands messages over.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("aggregator: reply subscription: %w", err)
	}
	in.sub = sub
	return in, nil
}

// makeInbox returns an inbox of reply subjects under name, not yet
// subscribed.
func makeInbox(name string, subjects bus.Subjects, log *slog.Logger) *inbox {
	return &inbox{prefix: name + "." + bus.ReplyToken() + ".", name: name, subjects: subjects, strays: newStrayLog(log, name),
		waiting: map[string]*pending{}, refused: map[string][]*pending{}, pressedAt: map[string]time.Time{},
		free: map[string][]freeSlot{}, deaf: map[string]time.Time{}}
}

// open returns a fresh reply subject and what its messages arrive on,
// progress reports too when reports is set; close forgets it, and
// remembers for a while that it ended. pressed says whether the call is
// to ask for free slots (see [inbox.pressed]); when it is, the pending
// has asked.
func (in *inbox) open(method string, reports bool) (subject string, p *pending, pressed bool, close func()) {
	token := bus.ReplyToken()
	p = &pending{reply: make(chan *nats.Msg, 1), progress: make(chan string, 1), method: method, direct: make(chan string, 1)}
	if reports {
		p.report = make(chan schema.JobProgress, 1)
	}
	in.mu.Lock()
	pressed = in.pressedLocked(method)
	p.askedFree.Store(pressed)
	in.waiting[token] = p
	in.mu.Unlock()
	return in.prefix + token, p, pressed, func() {
		in.mu.Lock()
		delete(in.waiting, token)
		in.ended.add(token)
		in.unrefuseLocked(p)
		in.mu.Unlock()
	}
}

// refuse records that p, first refused by a busy worker at since, waits
// to be published again, in line by since: a call refused again after a
// slot named free was taken under it keeps its place.
func (in *inbox) refuse(p *pending, since time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	p.since = since
	in.pressedAt[p.method] = time.Now()
	in.sweepLocked()
	q := in.refused[p.method]
	i := len(q)
	for i > 0 && q[i-1].since.After(since) {
		i--
	}
	in.refused[p.method] = slices.Insert(q, i, p)
}

// pressed reports whether calls of method were refused by busy workers,
// or sent to slots replies named free, within the last [pressedFor]:
// the calls of method then ask their workers to name the slots their
// replies free ([schema.HeaderNameFree]).
func (in *inbox) pressed(method string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pressedLocked(method)
}

// pressedLocked is pressed with in.mu held.
func (in *inbox) pressedLocked(method string) bool {
	at, ok := in.pressedAt[method]
	if ok && time.Since(at) > pressedFor {
		delete(in.pressedAt, method)
		return false
	}
	return ok
}

// pressedFor is how long calls ask for free slots after the last refusal
// or the last call sent to a slot named free.
const pressedFor = time.Second

// unrefuse takes p off the refused calls, when it is still there.
func (in *inbox) unrefuse(p *pending) {
	in.mu.Lock()
	in.unrefuseLocked(p)
	in.mu.Unlock()
}

func (in *inbox) unrefuseLocked(p *pending) {
	q := in.refused[p.method]
	for i, w := range q {
		if w == p {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(in.refused, p.method)
	} else {
		in.refused[p.method] = q
	}
}

// freed hands direct, the subject of a worker with n free slots for
// method, to up to n of the calls of method refused for want of room,
// oldest first.
func (in *inbox) freed(method, direct string, n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if at, ok := in.deaf[direct]; ok {
		if time.Since(at) < deafFor {
			return
		}
		delete(in.deaf, direct)
	}
	q := in.refused[method]
	for n > 0 && len(q) > 0 {
		p := q[0]
		q = q[1:]
		select {
		case p.direct <- direct:
			n--
		default:
		}
	}
	if len(q) == 0 {
		delete(in.refused, method)
	} else {
		in.refused[method] = q
	}
	if n == 0 {
		return
	}
	now := time.Now()
	f := in.free[method]
	for ; n > 0; n-- {
		f = append(f, freeSlot{direct: direct, at: now})
	}
	if len(f) > maxFreeOffered {
		f = f[len(f)-maxFreeOffered:]
	}
	in.free[method] = f
	in.sweepLocked()
}

// unheard records that a call sent to direct reached nobody: its worker
// is gone, or cannot subscribe there (NATS permissions older than rule
// 10). The slots it names are ignored for [deafFor], and those already
// named are forgotten.
func (in *inbox) unheard(direct string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.deaf[direct] = time.Now()
	for m, f := range in.free {
		kept := f[:0]
		for _, slot := range f {
			if slot.direct != direct {
				kept = append(kept, slot)
			}
		}
		if len(kept) == 0 {
			delete(in.free, m)
		} else {
			in.free[m] = kept
		}
	}
	if len(in.deaf) > maxMethodsTracked {
		now := time.Now()
		for d, at := range in.deaf {
			if now.Sub(at) >= deafFor {
				delete(in.deaf, d)
			}
		}
	}
}

// deafFor is how long the free slots of a worker whose direct subject
// reached nobody are ignored.
const deafFor = time.Minute

// maxMethodsTracked is how many methods the inbox keeps pressure and free
// slots for before it sweeps out those gone stale: a worker that serves a
// pattern may be called by many names, and the maps must not grow with
// them.
const maxMethodsTracked = 1024

// sweepLocked forgets the pressure and the free slots gone stale, once
// either map holds more than maxMethodsTracked methods. in.mu must be
// held.
func (in *inbox) sweepLocked() {
	if len(in.pressedAt) <= maxMethodsTracked && len(in.free) <= maxMethodsTracked {
		return
	}
	now := time.Now()
	for m, at := range in.pressedAt {
		if now.Sub(at) > pressedFor {
			delete(in.pressedAt, m)
		}
	}
	for m, f := range in.free {
		if len(f) == 0 || now.Sub(f[len(f)-1].at) > freeSlotTTL {
			delete(in.free, m)
		}
	}
}

// takeFree returns the direct subject of a worker a reply lately named
// with a free slot for method, and forgets that slot; false when none is
// known.
func (in *inbox) takeFree(method string) (string, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f := in.free[method]
	if len(f) == 0 {
		return "", false
	}
	now := time.Now()
	for len(f) > 0 && now.Sub(f[0].at) > freeSlotTTL {
		f = f[1:]
	}
	if len(f) == 0 {
		delete(in.free, method)
		return "", false
	}
	to := f[0].direct
	in.pressedAt[method] = now
	if f = f[1:]; len(f) == 0 {
		delete(in.free, method)
	} else {
		in.free[method] = f
	}
	return to, true
}

func (in *inbox) deliver(msg *nats.Msg) {
	token := msg.Subject[len(in.prefix):]
	in.mu.Lock()
	p := in.waiting[token]
	late := p == nil && in.ended.has(token)
	in.mu.Unlock()
	if p == nil {
		// A late answer, one of a call already answered, or a forgery:
		// it answers nothing.
		in.stray(late)
		return
	}
	if v := msg.Header.Get(schema.HeaderProgress); v != "" {
		if v == schema.ProgressBusy && in.subjects.IsDirect(msg.Header.Get(schema.HeaderDirect)) {
			v = progressBusyDirect
		}
		if v == schema.ProgressReport && p.report != nil {
			// A report the aggregator cannot read is still a sign of
			// life; only its content is dropped.
			if r, err := schema.UnmarshalProgress(msg.Data); err == nil {
				latest.Offer(p.report, r)
			}
		}
		select {
		case p.progress <- v:
		default:
			// Replace the unread value: drain it, then offer again. Only
			// this goroutine sends, so the second send cannot block.
			select {
			case old := <-p.progress:
				if isBusy(old) && !isBusy(v) {
					v = old // a refusal must not be lost behind a beat
				}
			default:
			}
			p.progress <- v
		}
		return
	}
	select {
	case p.reply <- msg:
	default:
	}
	// A reply names at most the one slot it frees (rule 10), and only
	// when its call asked: a worker must not draw calls it was not
	// offered, nor many at once.
	if !p.askedFree.Load() {
		return
	}
	if d := msg.Header.Get(schema.HeaderDirect); d != "" && in.subjects.IsDirect(d) {
		if n, err := strconv.Atoi(msg.Header.Get(schema.HeaderFree)); err == nil && n > 0 {
			in.freed(p.method, d, 1)
		}
	}
}

// nameFree is the value of [schema.HeaderNameFree].
var nameFree = []string{"1"}

// progressBusyDirect is how the inbox hands on a busy refusal from a
// worker that names its free slots on its replies (rule 10).
const progressBusyDirect = schema.ProgressBusy + "+direct"

func isBusy(v string) bool { return v == schema.ProgressBusy || v == progressBusyDirect }

// maxFreeOffered bounds the free slots kept for one method, however many
// replies name them.
const maxFreeOffered = 64

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

// badReply is the answer for a reply the aggregator cannot read: the
// worker broke the protocol. Its text names the method and what was wrong,
// never a subject of the bus.
func badReply(method string, err error) *schema.Error {
	return schema.NewError(schema.CodeInternal,
		"internal error: the worker serving "+method+" sent a reply that does not follow the bus protocol ("+
			strings.TrimPrefix(err.Error(), "bus: reply: ")+"); its author should check it against schema/PROTOCOL.md or toolbus conform",
		map[string]any{"reason": schema.ReasonBadReply, "method": method})
}

// timedOut is the answer of a call of method that missed its deadline of
// timeout, whoever noticed first: the aggregator (no reason) or the worker
// (reason deadline_in_worker).
func timedOut(method string, timeout time.Duration, reason string) *schema.Error {
	data := map[string]any{"retryable": true, "timeout_ms": timeout.Milliseconds(), "method": method}
	if reason != "" {
		data["reason"] = reason
	}
	return schema.NewError(schema.CodeTimeout, fmt.Sprintf("timed out: %s did not answer within %v", method, timeout), data)
}
