package ingress

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/schema"
)

// FairStats returns a snapshot of the fairness window and of each
// caller's queue; the zero value when fairness is off.
func (s *Server) FairStats() fair.Stats {
	if s.cfg.fair == nil {
		return fair.Stats{}
	}
	return s.cfg.fair.sched.Stats(time.Now())
}

// FairMetrics returns the toolbus_fair_* series by caller, each caller
// named (at most [DefaultMetricsMaxCallers] of them), whatever GET
// /metrics shows of them ([WithMetricsCallers]): for the views of the
// ingress that authenticate their reader, such as the dashboard. It is
// nil without fairness or without [WithMetrics].
func (s *Server) FairMetrics() prometheus.Gatherer {
	if s.cfg.fair == nil || s.cfg.fair.metrics == nil {
		return nil
	}
	return s.cfg.fair.metrics.byName
}

// fairness is the scheduler of a server and what drives it: one timer
// for the holds and deadlines, and the metrics.
type fairness struct {
	sched *fair.Scheduler[fairRef]
	// metrics is set by setupMetrics; nil without [WithMetrics].
	metrics *fairMetrics

	tmu   sync.Mutex
	timer *time.Timer
	wake  time.Time // when timer fires; zero when it is not set

	// poll is the barrier that ends a round at the process's next network
	// poll (see [fairness.awaitPoll]).
	poll netBarrier
}

// layer returns the fairness layer of the chain, which queues each call
// under the deadline the ingress puts on it ([Server.deadline]); nil
// when f is nil (fairness is off).
func (f *fairness) layer(deadline func(method string, timeout time.Duration) time.Duration) schema.Layer {
	if f == nil {
		return nil
	}
	return func(next schema.Dispatcher) schema.Dispatcher {
		return &fairDispatcher{f: f, next: next, deadline: deadline}
	}
}

func newFairness(f Fairness) (*fairness, error) {
	s, err := fair.New[fairRef](f.config())
	if err != nil {
		return nil, err
	}
	s.MeasureCPU(processCPU, runtime.GOMAXPROCS(0))
	return &fairness{sched: s}, nil
}

// fairRef names a queued entry's place: call i of a set, or a body
// (i 0 of a set of one), and the metrics of its caller (nil without
// metrics).
type fairRef struct {
	set  *fairSet
	i    int
	cm   *fairCallerMetrics
	body bool // a body waiting to be parsed, not a call
	// answered is set, for a call admitted alone, once its answer gave
	// its seat back (next calls emit one at a time, and never after it
	// returns, so the flag needs no lock).
	answered bool
}

// fairSet is what waits for the entries of one set of calls: the moves
// of its entries, one each at most, so that sending never blocks.
type fairSet struct {
	moves chan fairMove
}

// fairMove says that entry i was admitted, or expired in its queue.
type fairMove struct {
	i       int
	expired bool
}

// settle hands every entry that m moved to the set waiting for it, and
// sets the timer for the next hold or deadline.
func (f *fairness) settle(m fair.Moves[fairRef]) {
	for _, e := range m.Admitted {
		e.Value.cm.admitted(e.Admitted().Sub(e.Enqueued()), e.Value.body)
		e.Value.set.moves <- fairMove{i: e.Value.i}
	}
	for _, e := range m.Expired {
		e.Value.cm.expired()
		e.Value.set.moves <- fairMove{i: e.Value.i, expired: true}
	}
	if m.AwaitPoll {
		f.poll.await(f.polled)
	}
	f.arm()
}

// settleDone is settle after a Done: one that moved nothing sets no
// timer. A seat given back that admits nothing changes no deadline and no
// queue, so the timer set before still serves; only the hold it teaches
// may shorten (by an eighth of the difference at most), and a seat past
// the shorter hold, in a full window with entries queued, is then
// released at the timer set before rather than a little sooner.
func (f *fairness) settleDone(m fair.Moves[fairRef]) {
	if len(m.Admitted) == 0 && len(m.Expired) == 0 && !m.AwaitPoll {
		return
	}
	f.settle(m)
}

// yield lets other work run in the middle of a large batch's planning or
// answers: while callers compete, until the ingress has read its
// connections again, so that another caller's request read meanwhile is
// queued before the batch goes on; otherwise until the goroutines already
// runnable have run.
func (s *Server) yield() {
	if f := s.cfg.fair; f != nil && f.sched.Competing(time.Now()) && f.poll.wait() {
		return
	}
	runtime.Gosched()
}

// polled starts the scheduler's next round, the network having been
// polled.
func (f *fairness) polled() { f.settle(f.sched.Polled(time.Now())) }

// arm sets the timer for the scheduler's next wake when that comes
// sooner than the timer is set for. A timer that fires with nothing to do
// does nothing.
func (f *fairness) arm() {
	at, ok := f.sched.NextWake()
	if !ok {
		return
	}
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if !f.wake.IsZero() && !at.Before(f.wake) {
		return
	}
	f.wake = at
	if f.timer == nil {
		f.timer = time.AfterFunc(time.Until(at), f.tick)
		return
	}
	f.timer.Reset(time.Until(at))
}

func (f *fairness) tick() {
	f.tmu.Lock()
	f.wake = time.Time{}
	f.tmu.Unlock()
	f.settle(f.sched.Tick(time.Now()))
}

// flowOf is the flow of caller p; nil is the anonymous caller of an
// ingress without authentication.
func flowOf(p *auth.Principal) fair.Flow {
	if p == nil {
		return fair.Flow{}
	}
	return fair.Flow{Name: p.Name, Weight: p.Weight, Exempt: p.Exempt}
}

// parseAtOnce is the size under which a body of one request (not a
// batch) is parsed without waiting for its caller's turn, on every door:
// parsing it costs the ingress less than the call itself, which then
// waits its turn like any other.
const parseAtOnce = fair.CostUnit

// parsesAtOnce reports whether body is parsed without waiting for its
// caller's turn (see [parseAtOnce]).
func parsesAtOnce(body []byte) bool { return len(body) < parseAtOnce && isSingle(body) }

// isSingle reports whether a message holds one request rather than a
// batch: whether its first byte past JSON's white space is not '['.
func isSingle(body []byte) bool {
	for _, b := range body {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return b != '['
	}
	return true
}

// awaitTurn waits until the body that the caller of hdr sent may be
// parsed: its turn in the caller's queue, unless it parses at once
// ([parsesAtOnce]). It returns hdr with the
// time waited taken off the deadline the client asked for, and what ends
// the turn once the body's calls are planned; or the answer to the whole
// message when the caller's queue is full or the wait outlasted the
// deadline. Without fairness it returns at once.
func (s *Server) awaitTurn(ctx context.Context, hdr callHeaders, body []byte) (callHeaders, func(), *schema.Error) {
	f := s.cfg.fair
	if f == nil || parsesAtOnce(body) {
		return hdr, noTurn, nil
	}
	n := len(body)
	start := time.Now()
	timeout := s.deadline("", hdr.timeout)
	flow := flowOf(hdr.caller)
	one := make([]fair.Entry[fairRef], 1)
	e := &one[0]
	*e = fair.Entry[fairRef]{Value: fairRef{body: true}, Cost: fair.BodyCost(n), Untimed: true}
	if timeout > 0 {
		e.Deadline = start.Add(timeout)
	}
	if f.sched.AdmitAlone(start, flow, one) {
		// A caller alone: its turn is now, and no wait is counted.
		return hdr, func() { f.settleDone(f.sched.Done(time.Now(), e)) }, nil
	}
	set := &fairSet{moves: make(chan fairMove, 1)}
	cm := f.callerMetrics(flow.Name)
	e.Value.set, e.Value.cm = set, cm
	queued, m := f.sched.Enqueue(start, flow, []*fair.Entry[fairRef]{e})
	cm.queued(queued)
	f.settle(m)
	if queued == 0 {
		cm.refused(1)
		return hdr, noTurn, f.queueFull(flow.Name)
	}
	var mv fairMove
	select {
	case mv = <-set.moves:
	case <-ctx.Done():
		canceled, m := f.sched.Cancel(time.Now(), e)
		f.settle(m)
		if canceled {
			cm.canceled()
			return hdr, noTurn, schema.ErrorFrom(ctx.Err())
		}
		mv = <-set.moves // admitted or expired meanwhile
	}
	if mv.expired {
		return hdr, noTurn, schema.NewError(schema.CodeTimeout,
			fmt.Sprintf("timed out: the request waited in this caller's queue on the ingress until its deadline (%v) before it could be read; "+
				"send less at once, or give it a longer Toolbus-Timeout", timeout.Round(time.Millisecond)),
			map[string]any{"retryable": true, "timeout_ms": timeout.Milliseconds()})
	}
	if hdr.timeout > 0 {
		hdr.timeout = max(hdr.timeout-time.Since(start), time.Millisecond)
	}
	return hdr, func() { f.settleDone(f.sched.Done(time.Now(), e)) }, nil
}

// noTurn ends a turn that was never given.
func noTurn() {}

// queueFull is the refusal of a call, or a body, that does not fit in
// its caller's queue.
func (f *fairness) queueFull(caller string) *schema.Error {
	max := f.sched.Config().FlowMaxQueued
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: this caller already has %d calls' worth queued on this ingress, its most (caller_max_queued); "+
			"wait for answers before sending more, or send fewer at once", max),
		map[string]any{"retryable": true, "retry_after_ms": f.sched.RetryAfter(caller).Milliseconds(),
			"limit": "caller_max_queued", "max": max})
}

// callerMetrics returns the metrics of caller's queue; nil without
// metrics.
func (f *fairness) callerMetrics(caller string) *fairCallerMetrics {
	if f.metrics == nil {
		return nil
	}
	return f.metrics.forCaller(caller)
}

// fairDispatcher is the fairness layer in front of next.
type fairDispatcher struct {
	f        *fairness
	next     schema.Dispatcher
	deadline func(method string, timeout time.Duration) time.Duration
}

// Dispatch queues every call in its caller's queue under its deadline
// (the one it carries, settled by the ingress), and hands the calls to
// next as the scheduler admits them; the calls of a caller alone skip
// the queue and go on at once ([fairDispatcher.alone]). A
// call that does not fit in its caller's queue is refused -32002 at
// once, and one whose deadline comes while it waits is answered -32001
// without reaching next. When ctx ends, the calls still queued are
// answered -32004. The ingress's own rpc.* methods pass at once: they
// are its own light work, and the jobs service shares the jobs among
// callers itself.
func (d *fairDispatcher) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	if len(calls) == 0 {
		return
	}
	reserved := 0
	for i := range calls {
		if schema.IsReserved(calls[i].Method) {
			reserved++
		}
	}
	switch reserved {
	case 0:
		// A caller alone skips the queue; its calls go on from here
		// rather than from queue, whose large frame would deepen the
		// stack under every answer next gives on this goroutine.
		a, entries := d.alone(ctx, calls, emit)
		if a == nil {
			d.queued(ctx, calls, entries, emit)
			return
		}
		// Every seat is given back, even should next panic (the ingress
		// recovers from that and goes on serving).
		defer a.done()
		d.next.Dispatch(ctx, a.calls, a.emit)
	case len(calls):
		d.next.Dispatch(ctx, calls, emit)
	default:
		var own, rest schema.Subset
		for i := range calls {
			if schema.IsReserved(calls[i].Method) {
				own.Add(i, calls[i])
			} else {
				rest.Add(i, calls[i])
			}
		}
		var mu sync.Mutex
		locked := func(i int, r schema.Response) {
			mu.Lock()
			defer mu.Unlock()
			emit(i, r)
		}
		var wg sync.WaitGroup
		wg.Go(func() { own.Dispatch(ctx, d.next, locked) })
		rest.Dispatch(ctx, schema.DispatcherFunc(d.queue), locked)
		wg.Wait()
	}
}

// entries returns the entries of calls, queued at now: each of cost
// [fair.Cost] of its params, under the deadline the ingress puts on it,
// or ctx's when that comes first.
func (d *fairDispatcher) entries(ctx context.Context, now time.Time, calls []schema.Call) []fair.Entry[fairRef] {
	return d.entriesInto(ctx, now, calls, make([]fair.Entry[fairRef], len(calls)))
}

// entriesInto is entries made in entries, as long as calls.
func (d *fairDispatcher) entriesInto(ctx context.Context, now time.Time, calls []schema.Call, entries []fair.Entry[fairRef]) []fair.Entry[fairRef] {
	ctxDeadline, bounded := ctx.Deadline()
	for i := range calls {
		deadline := now.Add(d.deadline(calls[i].Method, calls[i].Timeout))
		if bounded && (deadline.IsZero() || ctxDeadline.Before(deadline)) {
			deadline = ctxDeadline
		}
		entries[i] = fair.Entry[fairRef]{Value: fairRef{i: i}, Cost: fair.Cost(len(calls[i].Params)), Deadline: deadline}
	}
	return entries
}

// queue is Dispatch for calls that all wait their turn.
func (d *fairDispatcher) queue(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	d.queued(ctx, calls, nil, emit)
}

// queued is queue with the calls' entries made already, or nil.
func (d *fairDispatcher) queued(ctx context.Context, calls []schema.Call, entries []fair.Entry[fairRef], emit func(i int, r schema.Response)) {
	f := d.f
	now := time.Now()
	if entries == nil {
		entries = d.entries(ctx, now, calls)
	}
	p, _ := ctx.Value(callerKey{}).(*auth.Principal)
	out := &fairEmitter{calls: calls, emit: emit}
	answer := out.answer
	set := &fairSet{moves: make(chan fairMove, len(calls))}
	ptrs := make([]*fair.Entry[fairRef], len(calls))
	for i := range entries {
		entries[i].Value.set = set
		ptrs[i] = &entries[i]
	}
	// A set's calls are one caller's; should they not be, each run of one
	// caller's calls goes to its own queue.
	open := 0
	for from := 0; from < len(calls); {
		caller := calls[from].Caller
		to := from + 1
		for to < len(calls) && calls[to].Caller == caller {
			to++
		}
		flow := fair.Flow{Name: caller}
		if p != nil && p.Name == caller {
			flow = flowOf(p)
		}
		cm := f.callerMetrics(caller)
		for i := from; i < to; i++ {
			entries[i].Value.cm = cm
		}
		n, m := f.sched.Enqueue(now, flow, ptrs[from:to])
		cm.queued(n)
		f.settle(m)
		open += n
		if refused := to - from - n; refused > 0 {
			cm.refused(refused)
			e := f.queueFull(caller)
			for i := from + n; i < to; i++ {
				answer(i, schema.Response{ID: calls[i].ID, Error: e})
			}
		}
		from = to
	}

	var wg sync.WaitGroup
	done := ctx.Done()
	for open > 0 {
		select {
		case mv := <-set.moves:
			var group []int
			for {
				open--
				if mv.expired {
					answer(mv.i, schema.Response{ID: calls[mv.i].ID, Error: queuedTooLong(&calls[mv.i], entries[mv.i].Deadline.Sub(entries[mv.i].Enqueued()))})
				} else {
					group = append(group, mv.i)
				}
				if open == 0 {
					break
				}
				select {
				case mv = <-set.moves:
					continue
				default:
				}
				break
			}
			if run := d.prepare(ctx, calls, ptrs, group, out); run != nil {
				if open == 0 {
					// No move can come any more: the last calls run on
					// this goroutine, as do those of a set admitted at
					// once, the common case of an ingress not in demand.
					run()
				} else {
					wg.Go(run)
				}
			}
		case <-done:
			done = nil
			now := time.Now()
			for i := range ptrs {
				if canceled, m := f.sched.Cancel(now, ptrs[i]); canceled {
					f.settle(m)
					open--
					ptrs[i].Value.cm.canceled()
					answer(i, schema.Response{ID: calls[i].ID, Error: schema.ErrorFrom(ctx.Err())})
				}
			}
		}
	}
	wg.Wait()
}

// alone admits calls at once when their caller is alone
// ([fair.Scheduler.AdmitAlone]): every call of one caller, none queued,
// and seats for all of them. It returns what hands them to next, on the
// dispatching goroutine; or nil, when they must queue, with their entries
// (nil when it made none). The calls go on as the queue would have handed
// them on the moment they were admitted: each with what is left of its
// deadline, its seat given back as it is answered, and counted in the
// caller's metrics as admitted without a wait. This is what a caller
// alone pays for fairness: no queue, no hand-off, one lock to enter and
// one per answer.
func (d *fairDispatcher) alone(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) (*fairAlone, []fair.Entry[fairRef]) {
	caller := calls[0].Caller
	for i := 1; i < len(calls); i++ {
		if calls[i].Caller != caller {
			return nil, nil
		}
	}
	if ctx.Err() != nil {
		return nil, nil
	}
	flow := fair.Flow{Name: caller}
	if p, _ := ctx.Value(callerKey{}).(*auth.Principal); p != nil && p.Name == caller {
		flow = flowOf(p)
	}
	f := d.f
	now := time.Now()
	// A single call, the most common set, takes its entry and its copy
	// from the set's own arrays: one allocation where there would be
	// three.
	a := &fairAlone{f: f}
	var entries []fair.Entry[fairRef]
	if len(calls) == 1 {
		entries, a.calls = d.entriesInto(ctx, now, calls, a.oneEntry[:]), a.oneCall[:]
	} else {
		entries, a.calls = d.entries(ctx, now, calls), make([]schema.Call, len(calls))
	}
	if !f.sched.AdmitAlone(now, flow, entries) {
		return nil, entries
	}
	f.callerMetrics(caller).admittedAtOnce(len(calls))
	a.entries = entries
	for i := range calls {
		a.calls[i] = calls[i]
		if dl := entries[i].Deadline; !dl.IsZero() {
			a.calls[i].Timeout = dl.Sub(now)
		}
	}
	// A closure, not a method value: the answers run back through it on
	// a stack that is deep already, and a method value adds a frame. It
	// takes no lock: next calls it from one goroutine at a time, as every
	// Dispatcher does, and there is no other caller of emit here.
	a.emit = func(i int, r schema.Response) {
		if i >= 0 && i < len(calls) {
			a.f.done(&a.entries[i])
			a.entries[i].Value.answered = true
			if calls[i].IsNotification() {
				return
			}
		}
		emit(i, r)
	}
	return a, nil
}

// fairAlone is a set of calls admitted at once ([fairDispatcher.alone]):
// the calls handed on, their entries, and what hands their answers on.
type fairAlone struct {
	f       *fairness
	entries []fair.Entry[fairRef]
	calls   []schema.Call
	emit    func(i int, r schema.Response)
	// oneEntry and oneCall hold the entry and the call of a set of one.
	oneEntry [1]fair.Entry[fairRef]
	oneCall  [1]schema.Call
}

// done gives back the seats of the calls next left unanswered (a
// notification's, or any call of a next that answered another twice or
// panicked), once next has returned; a seat given back already is left
// as it is.
func (a *fairAlone) done() {
	var now time.Time
	for i := range a.entries {
		if a.entries[i].Value.answered {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		a.f.settleDone(a.f.sched.Done(now, &a.entries[i]))
	}
}

// prepare returns what hands the admitted calls of group to next, each
// with what is left of its deadline, and gives back each one's seat as it
// is answered (a notification's, and that of a call next left
// unanswered, once next returns); nil when none is left to hand on, the
// others having been answered already (their deadline passed, or ctx
// ended).
func (d *fairDispatcher) prepare(ctx context.Context, calls []schema.Call, ptrs []*fair.Entry[fairRef], group []int, out *fairEmitter) func() {
	f := d.f
	now := time.Now()
	sub := make([]schema.Call, 0, len(group))
	idx := make([]int, 0, len(group))
	for _, i := range group {
		c := calls[i]
		left := ptrs[i].Deadline.Sub(now)
		if ctx.Err() != nil || !ptrs[i].Deadline.IsZero() && left <= 0 {
			f.settleDone(f.sched.Done(now, ptrs[i]))
			e := schema.ErrorFrom(ctx.Err())
			if ctx.Err() == nil {
				e = queuedTooLong(&calls[i], ptrs[i].Deadline.Sub(ptrs[i].Enqueued()))
			}
			out.answer(i, schema.Response{ID: calls[i].ID, Error: e})
			continue
		}
		if !ptrs[i].Deadline.IsZero() {
			c.Timeout = left
		}
		sub = append(sub, c)
		idx = append(idx, i)
	}
	if len(sub) == 0 {
		return nil
	}
	return func() {
		// Every seat is given back, even should next panic.
		defer func() {
			now := time.Now()
			for _, i := range idx {
				f.settleDone(f.sched.Done(now, ptrs[i]))
			}
		}()
		d.next.Dispatch(ctx, sub, func(j int, r schema.Response) {
			i := -1 // out of range in the set too: the receiver reports it
			if j >= 0 && j < len(idx) {
				i = idx[j]
				f.done(ptrs[i])
			}
			out.answer(i, r)
		})
	}
}

// fairEmitter hands a set's answers to its emit, one at a time, and
// drops those of notifications.
type fairEmitter struct {
	mu    sync.Mutex
	calls []schema.Call
	emit  func(i int, r schema.Response)
}

// answer emits r for call i. It is small, so that it adds no frame to
// the answer's way back, which runs on the dispatcher's goroutine.
func (o *fairEmitter) answer(i int, r schema.Response) {
	if i >= 0 && i < len(o.calls) && o.calls[i].IsNotification() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.emit(i, r)
}

// done gives back the seat of e, answered now.
func (f *fairness) done(e *fair.Entry[fairRef]) {
	f.settleDone(f.sched.Done(time.Now(), e))
}

// queuedTooLong is the answer of call c whose deadline, timeout after it
// was queued, came while it waited in its caller's queue: it never
// reached a worker.
func queuedTooLong(c *schema.Call, timeout time.Duration) *schema.Error {
	return schema.NewError(schema.CodeTimeout,
		fmt.Sprintf("timed out: %s waited in this caller's queue on the ingress until its deadline (%v) and reached no worker; "+
			"send fewer calls at once, or give them a longer Toolbus-Timeout", c.Method, timeout.Round(time.Millisecond)),
		map[string]any{"retryable": true, "timeout_ms": timeout.Milliseconds(), "method": c.Method})
}
