package aggregator

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// This file is the table of the calls in flight on the bus and the
// transitions of a call. A call in flight is an entry keyed by its reply
// token; the messages on its reply subject (an ack, a beat, a progress
// report, a busy refusal, the reply) and its timers (its deadline, its ack
// timeout, its worker's silence, its backoff, its hedge) move it from
// state to state, under the table's one lock, and nothing waits for it:
// the answer is handed on from whichever event gave it.

// state is where a call stands.
type state uint8

const (
	// outside: held by a goroutine outside the table (being admitted,
	// run by the [Local], or behind an idempotency record); the table
	// neither times nor cancels it. The zero value.
	outside state = iota
	// queued: waiting for a free slot of its batch's concurrency, under
	// its deadline; not published.
	queued
	// published: sent, with no word from a worker yet; a retry-safe call
	// is published again when nobody acknowledges it within the ack
	// timeout. A call that let its worker hold back the ack is lost, as
	// a running one is, when it stays silent for the delay and misses
	// heartbeat intervals.
	published
	// running: a worker took it (an ack, a beat or a report came); it is
	// lost when its worker stays silent for misses heartbeat intervals.
	running
	// refused: a busy worker refused it; it waits in its method's line
	// for a slot a reply names free, or for its backoff to end.
	refused
	// parked: due to be published again while the bus is away; it is,
	// once the connection is back.
	parked
	// local: run by a [LocalStarter], under its deadline; the handler's
	// answer, its deadline or its batch's end answers it.
	local
	// answered: it has its answer and has left the table.
	answered
)

var stateNames = [...]string{"outside", "queued", "published", "running", "refused", "parked", "local", "answered"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// moment is an instant of the table's clock, counted in nanoseconds from
// [epoch]: a call keeps its deadline and its timers as moments, 8 bytes
// where a time.Time takes 24, as every call in flight holds eight of
// them. The zero moment is unset (a timer not armed): [momentOf] and
// [moment.add] never return it. Moments compare with < and ==, as the
// times they were made from do.
type moment int64

// epoch is the instant moments count from: the clock as the package was
// loaded, read with its monotonic reading, so that a time that has one
// (time.Now's) counts on the monotonic clock, as time.Time's own
// comparisons do, and is not moved when the wall clock is set. A time
// without one (a test's clock, a deadline read off the wire) counts by
// the wall clock from the epoch's wall reading; it may come before the
// epoch, a negative moment.
//
// It is state of the process, not of an aggregator, and it is read-only:
// every table counts from the same instant, and no table needs another.
var epoch = time.Now()

// momentOf returns the moment of t. An instant that falls on the epoch
// is moved a nanosecond on, as the zero moment is unset.
func momentOf(t time.Time) moment {
	return nonZero(moment(t.Sub(epoch)))
}

// add returns the moment d after m; never the zero moment. Past the
// range of a moment it stops at the end, as time.Time.Add does, so that a
// timer set a very long way off (an ack timeout meant as never) is never
// due at once.
func (m moment) add(d time.Duration) moment {
	sum := m + moment(d)
	switch {
	case d > 0 && sum < m:
		return math.MaxInt64
	case d < 0 && sum > m:
		return math.MinInt64
	}
	return nonZero(sum)
}

// sub returns the time from o to m, stopping at the range of a Duration
// as time.Time.Sub does.
func (m moment) sub(o moment) time.Duration {
	d := time.Duration(m - o)
	switch {
	case o < 0 && m > 0 && d < 0:
		return math.MaxInt64
	case o > 0 && m < 0 && d > 0:
		return math.MinInt64
	}
	return d
}

// on returns m as a time read on the clock of anchor: anchor moved on by
// the time from anchor's moment to m. Its wall reading is anchor's plus
// that time, so a deadline set from anchor shows the wall clock anchor
// was read on, as the time it was made from does, whether or not the
// wall clock was set since the epoch.
func (m moment) on(anchor time.Time) time.Time {
	return anchor.Add(m.sub(momentOf(anchor)))
}

func nonZero(m moment) moment {
	if m == 0 {
		return 1
	}
	return m
}

// call is one call of a batch, from its admission to its answer. The
// table's lock guards the fields the table moves (from state on) while
// the call is in the table.
type call struct {
	c *schema.Call
	b *batch
	// i is the call's index in its batch, and index its place in the
	// timers (-1 when not there): 32 bits each, so that they share a
	// word.
	i, index int32
	method   string
	timeout  time.Duration
	deadline moment
	// held is what it holds of the in-flight caps, and brk reports its
	// outcome to its method's circuit breaker; both are given back with
	// the answer, as is its batch slot when slot (below) is set.
	held held
	brk  func(*schema.Error)
	// sync, when not nil, is closed at the answer for the goroutine that
	// waits for it (a call behind an idempotency record), which then
	// answers the batch itself.
	sync chan struct{}
	// stop, while the call is local, ends its handler's context.
	stop func()

	// On the bus: data, its envelope, is published on queue (the
	// method's subject) or on a direct subject; token ends its reply
	// subject. Its message is made anew for each publication
	// ([table.message]) rather than kept, so that a call in flight holds
	// its envelope and not a message and its headers.
	data   []byte
	queue  string
	token  string
	callID string
	// ask, when not nil, holds the key of a call whose caller can answer
	// its tool's questions (rule 11); see ask.go.
	ask *asking
	// safe is set when the call may run more than once (retry-safe).
	// The flags, slot and safe here and those after state, are declared
	// together so that they share one word rather than take one each.
	slot, safe bool

	state state
	// delayed is set when the call lets its worker hold back the ack
	// (Toolbus-Ack-Delay); watchQuiet, while it is published, when its
	// silence since sentAt, its latest publication, may yet lose it.
	delayed, watchQuiet bool
	// askedFree is set once the call asks its workers to name the slots
	// their replies free: only then may its reply name one.
	askedFree bool
	sentAt    moment
	attempts  int // publications that may have run the call
	// direct is the direct subject of the latest publication; "" when it
	// went to the queue group.
	direct string
	// The timers; the zero moment is not armed. heardAt is when its
	// worker last spoke, for the silence of a running call.
	ackAt, heardAt, retryAt, hedgeAt moment
	// busy is what busy workers' refusals of the call decided; nil
	// until the first.
	busy *busyRefusals

	due moment // when the timers want it next

	result []byte
	err    *schema.Error
	next   *call // in a list of answered calls
}

// busyRefusals is what busy workers' refusals of a call decided (rule
// 10): when the first came, which places the call in its method's line,
// and how long it waits after the next before it is published again, by
// whether the refusing worker names its free slots or not. A call gets
// it at its first refusal, as most calls are never refused.
type busyRefusals struct {
	first                 moment
	backoff, namedBackoff time.Duration
}

// nextDue returns when cl is next due under p: the first of its armed
// timers.
func (cl *call) nextDue(p *policy) moment {
	due := cl.deadline
	for _, t := range [...]moment{cl.ackAt, cl.retryAt, cl.hedgeAt} {
		if t != 0 && t < due {
			due = t
		}
	}
	switch {
	case cl.state == running:
		if t := cl.heardAt.add(p.silence); t < due {
			due = t
		}
	case cl.state == published && cl.watchQuiet:
		if t := cl.sentAt.add(p.quiet()); t < due {
			due = t
		}
	}
	return due
}

// deadlineTime returns cl's deadline as a time, read on the clock of its
// batch's start, from which the deadline was set: its wall reading, which
// a worker is told, is the one the deadline was set with.
func (cl *call) deadlineTime() time.Time { return cl.deadline.on(cl.b.start) }

// policy is what the table does with a call's messages and timers.
type policy struct {
	// liveness: calls carry the heartbeat headers, and the table watches
	// acks and heartbeats, retries and hedges retry-safe calls, and
	// handles busy refusals and free slots. Without it a call waits for
	// its reply or its deadline.
	liveness   bool
	silence    time.Duration // misses heartbeat intervals
	ackTimeout time.Duration
	// ackDelay is how long workers may hold back the ack of a call of a
	// method known to acknowledge, in whole milliseconds; zero when every
	// call asks for the ack at once.
	ackDelay    time.Duration
	maxAttempts int
	busyWait    time.Duration
	hedge       time.Duration
	// recheck is how often a parked call looks whether the bus is back.
	recheck time.Duration
}

// quiet is how long a published call that let its worker hold back the
// ack may stay silent before its worker is lost: the ack was due at the
// end of the delay, and from then on the worker gets the silence a
// worker gets after its ack.
func (p *policy) quiet() time.Duration { return p.ackDelay + p.silence }

// wire is what the table sends on the bus. Its methods are called with
// the table's lock held, and must not call back into the table.
type wire interface {
	// publish sends m, a call of method; an error is the call's answer,
	// and its reason is [schema.ReasonBusDisconnected] when the
	// connection is away.
	publish(m *nats.Msg, method string) *schema.Error
	// cancel tells the workers that nobody waits for the call of callID
	// any more (rule 7).
	cancel(callID string)
}

// table holds the calls in flight and moves them. It is safe for
// concurrent use.
type table struct {
	// prefix begins every reply subject: name, a [bus.ReplyToken] and a
	// dot; the call's token ends it.
	prefix   string
	name     string
	subjects bus.Subjects
	policy   policy
	wire     wire
	log      *slog.Logger
	// now reads the clock; arm asks for tick to run in d; answer hands
	// on an answered call, without the lock.
	now    func() time.Time
	arm    func(d time.Duration)
	answer func(*call)
	// strays logs the messages that reached no call it remembers, and
	// strayCounters counts them with the late ones.
	strays *strayLog
	strayCounters
	// questionCounters counts the questions of tools it dropped.
	questionCounters

	mu      sync.Mutex
	calls   map[string]*call
	timers  timers
	armedAt moment // when tick is due; zero when not armed
	slots   freeSlots
	// ended holds the reply tokens of the calls that ended last, so that
	// a late answer is told from one to a subject never made.
	ended endedTokens
	// acks is whether the workers of each method acknowledge calls:
	// only then do its calls let them hold back the ack, with
	// ackDelayHeader.
	acks           ackHistory
	ackDelayHeader []string
	// heartbeatHeader and missesHeader are the values of the liveness
	// headers every call carries, when liveness is on.
	heartbeatHeader, missesHeader []string
}

// newTable returns a table of reply subjects under name, which hands its
// answers to answer.
func newTable(name string, subjects bus.Subjects, p policy, w wire, log *slog.Logger, answer func(*call)) *table {
	t := &table{prefix: name + "." + bus.ReplyToken() + ".", name: name, subjects: subjects, policy: p, wire: w,
		log: log, now: time.Now, arm: func(time.Duration) {}, answer: answer, strays: newStrayLog(log, name),
		calls: map[string]*call{}, slots: newFreeSlots(), acks: newAckHistory()}
	if p.ackDelay > 0 {
		t.ackDelayHeader = []string{strconv.FormatInt(p.ackDelay.Milliseconds(), 10)}
	}
	return t
}

// answers is a list of calls answered under the lock, handed on after it.
type answers struct{ head, tail *call }

func (l *answers) add(cl *call) {
	cl.next = nil
	if l.tail == nil {
		l.head = cl
	} else {
		l.tail.next = cl
	}
	l.tail = cl
}

// settle hands on the calls of l, without the lock, and ends the
// handler's context of a local call answered without its handler. Once
// a call is answered, only settle reads its stop.
func (t *table) settle(l *answers) {
	for cl := l.head; cl != nil; {
		next := cl.next
		cl.next = nil
		if stop := cl.stop; stop != nil {
			cl.stop = nil
			stop()
		}
		t.answer(cl)
		cl = next
	}
}

// unlock releases the lock after an event at now: it arms the timer for
// the first call due, then hands on what the event answered.
func (t *table) unlock(now time.Time, out *answers) {
	if first := t.timers.first(); first != nil && (t.armedAt == 0 || first.due < t.armedAt) {
		t.armedAt = first.due
		t.arm(max(first.due.sub(momentOf(now)), 0))
	}
	t.mu.Unlock()
	t.settle(out)
}

// finish gives cl its answer and takes it out of the table; a call
// answered already keeps its answer.
func (t *table) finish(cl *call, result []byte, e *schema.Error, out *answers) {
	if cl.state == answered {
		return
	}
	if cl.state == refused {
		t.slots.leaveLine(cl)
	}
	if cl.token != "" && t.calls[cl.token] == cl {
		delete(t.calls, cl.token)
		t.ended.add(cl.token)
	}
	t.timers.drop(cl)
	// A local call answered here, without its handler, keeps its stop:
	// settle calls it, without the lock, to end the handler's context.
	cl.state = answered
	cl.result, cl.err = result, e
	out.add(cl)
}

// schedule puts cl in the timers for when it is next due.
func (t *table) schedule(cl *call) {
	if due := cl.nextDue(&t.policy); cl.index < 0 || due != cl.due {
		t.timers.set(cl, due)
	}
}

// answerOutside answers cl, held outside the table, with result or e.
func (t *table) answerOutside(cl *call, result []byte, e *schema.Error) {
	var out answers
	t.mu.Lock()
	t.finish(cl, result, e, &out)
	t.mu.Unlock()
	t.settle(&out)
}

// enterable reports whether cl, admitted, may enter the table at now: it
// is still outside it, and neither its batch was canceled nor its
// deadline passed while it was admitted; a call that may not for either
// reason is answered so into out. t.mu must be held.
func (t *table) enterable(cl *call, now time.Time, out *answers) bool {
	switch {
	case cl.state != outside:
		return false
	case cl.b.ctx.Err() != nil:
		t.finish(cl, nil, ctxError(cl.b.ctx, cl.method, cl.timeout), out)
		return false
	case momentOf(now) >= cl.deadline:
		t.finish(cl, nil, timedOut(cl.method, cl.timeout, ""), out)
		return false
	}
	return true
}

// enterLocal enters cl, admitted, as run by the Local, under its
// deadline, and reports whether it did: a call whose batch was canceled,
// or whose deadline passed, while it was admitted is answered so.
func (t *table) enterLocal(cl *call) bool {
	var out answers
	t.mu.Lock()
	now := t.now()
	if t.enterable(cl, now, &out) {
		cl.state, cl.index = local, -1
		t.schedule(cl)
	}
	entered := cl.state == local
	t.unlock(now, &out)
	return entered
}

// leaveLocal takes cl, which the Local did not take, out of the table
// to be published, and reports whether it was still there (not answered
// at its deadline or its batch's end meanwhile).
func (t *table) leaveLocal(cl *call) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cl.state != local {
		return false
	}
	t.timers.drop(cl)
	cl.state = outside
	return true
}

// localStarted keeps stop, which ends the handler's context of cl, for
// when the table answers cl without its handler; when it did so already,
// it calls stop now.
func (t *table) localStarted(cl *call, stop func()) {
	t.mu.Lock()
	if cl.state == local {
		cl.stop = stop
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	stop()
}

// answerLocal answers cl with what its handler returned, unless it was
// answered already. An error that comes once the call's deadline passed
// or its batch ended is answered as the table answers those, so that a
// handler that listens to its context and one that does not are answered
// alike.
func (t *table) answerLocal(cl *call, result []byte, e *schema.Error) {
	var out answers
	t.mu.Lock()
	if cl.state == local {
		// The handler returned: its context ended with it.
		cl.stop = nil
		if e != nil {
			switch {
			case cl.b.ctx.Err() != nil:
				e = ctxError(cl.b.ctx, cl.method, cl.timeout)
			case momentOf(t.now()) >= cl.deadline:
				e = timedOut(cl.method, cl.timeout, "")
			}
		}
		t.finish(cl, result, e, &out)
	}
	t.mu.Unlock()
	t.settle(&out)
}

// enqueue puts cl, waiting for a slot of its batch, under its deadline.
func (t *table) enqueue(cl *call) {
	var out answers
	t.mu.Lock()
	cl.state = queued
	t.schedule(cl)
	t.unlock(t.now(), &out)
}

// dequeue takes cl out of the table to be admitted, and reports whether
// it still waited there.
func (t *table) dequeue(cl *call) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cl.state != queued {
		return false
	}
	t.timers.drop(cl)
	cl.state = outside
	return true
}

// start publishes cl, admitted, with its envelope data on subject, and
// enters it in the table.
// A call whose batch was canceled, or whose deadline passed, while it
// was admitted is answered so.
func (t *table) start(cl *call, subject string, data []byte) {
	var out answers
	t.mu.Lock()
	now := t.now()
	switch {
	case !t.enterable(cl, now, &out):
		// Not outside, or answered as it was admitted.
	default:
		cl.data, cl.queue, cl.index = data, subject, -1
		cl.token = bus.ReplyToken()
		t.calls[cl.token] = cl
		if t.policy.liveness && t.slots.pressed(cl.method, now) {
			t.askFree(cl)
		}
		// The ack may be held back only by workers known to send it:
		// until then it comes at once, and a worker lost holding the call
		// is noticed by its silence after it.
		if t.ackDelayHeader != nil && t.acks.acknowledges(cl.method, now) {
			cl.delayed = true
		}
		cl.attempts = 1
		if e := t.send(cl, now, ""); e != nil {
			t.finish(cl, nil, e, &out)
			break
		}
		cl.state = published
		cl.watchQuiet = cl.delayed
		if t.policy.liveness && cl.safe && cl.attempts < t.policy.maxAttempts {
			cl.ackAt = momentOf(now).add(t.policy.ackTimeout)
			if t.policy.hedge > 0 {
				cl.hedgeAt = momentOf(now).add(t.policy.hedge)
			}
		}
		t.schedule(cl)
	}
	t.unlock(now, &out)
}

// askFree makes cl ask its workers to name the slots their replies free.
func (t *table) askFree(cl *call) { cl.askedFree = true }

// nameFree is the value of [schema.HeaderNameFree].
var nameFree = []string{"1"}

// send publishes cl to to, a direct subject; with to empty, to a slot a
// reply lately named free when cl asks for them and one is known, else
// to the queue group.
func (t *table) send(cl *call, now time.Time, to string) *schema.Error {
	if to == "" && cl.askedFree {
		to, _ = t.slots.take(cl.method, now)
	}
	cl.direct = to
	subject := cl.queue
	if to != "" {
		subject = to + "." + cl.method
	}
	cl.sentAt = momentOf(now)
	return t.wire.publish(t.message(cl, subject), cl.method)
}

// message makes the message that publishes cl on subject: its envelope,
// its reply subject, and the headers of what it is now (PROTOCOL.md,
// section 2): every attempt carries the same deadline, call id, reply
// subject and ask key.
func (t *table) message(cl *call, subject string) *nats.Msg {
	h := make(nats.Header, 8)
	// The call's own values share one array rather than take a slice
	// each.
	v := new([4]string)
	v[0] = schema.FormatDeadline(cl.deadlineTime())
	h[schema.HeaderDeadline] = v[0:1:1]
	if tp := cl.c.TraceParent; tp != "" {
		v[1] = tp
		h[schema.HeaderTraceparent] = v[1:2:2]
	}
	if cl.callID != "" {
		v[2] = cl.callID
		h[schema.HeaderCallID] = v[2:3:3]
	}
	if t.heartbeatHeader != nil {
		h[schema.HeaderHeartbeat] = t.heartbeatHeader
		h[schema.HeaderHeartbeatMisses] = t.missesHeader
	}
	if cl.delayed {
		h[schema.HeaderAckDelay] = t.ackDelayHeader
	}
	if cl.askedFree {
		h[schema.HeaderNameFree] = nameFree
	}
	if cl.ask != nil {
		v[3] = cl.ask.key.String()
		h[schema.HeaderAskKey] = v[3:4:4]
	}
	return &nats.Msg{Subject: subject, Reply: t.prefix + cl.token, Header: h, Data: cl.data}
}

// resend publishes cl again, as send does, and makes it published: its
// ack timeout starts again when it is retry-safe with attempts left, and
// its quiet time when it lets its worker hold back the ack. A call the
// bus is away for is parked until it is back; another error answers it.
func (t *table) resend(cl *call, now time.Time, to string, out *answers) {
	cl.retryAt, cl.ackAt = 0, 0
	cl.watchQuiet = false
	e := t.send(cl, now, to)
	switch {
	case e == nil:
		cl.state = published
		cl.watchQuiet = cl.delayed
		if t.policy.liveness && cl.safe && cl.attempts < t.policy.maxAttempts {
			cl.ackAt = momentOf(now).add(t.policy.ackTimeout)
		}
	case e.Reason() == schema.ReasonBusDisconnected:
		cl.state = parked
		cl.retryAt = momentOf(now).add(t.policy.recheck)
	default:
		t.finish(cl, nil, e, out)
	}
}

// deliver is the reply subscription's handler: it moves the call the
// message is for, or counts a stray.
func (t *table) deliver(m *nats.Msg) {
	if len(m.Subject) <= len(t.prefix) || m.Subject[:len(t.prefix)] != t.prefix {
		t.stray(false)
		return
	}
	token := m.Subject[len(t.prefix):]
	var out answers
	t.mu.Lock()
	cl := t.calls[token]
	if cl == nil {
		late := t.ended.has(token)
		if late && t.ackDelayHeader != nil && m.Header.Get(schema.HeaderProgress) == "" {
			t.acks.lateReply(token, t.now())
		}
		t.mu.Unlock()
		// A late answer, one of a call already answered, or a forgery:
		// it answers nothing.
		t.stray(late)
		return
	}
	now := t.now()
	if v := m.Header.Get(schema.HeaderProgress); v != "" {
		t.progressed(cl, v, m, now, &out)
	} else {
		t.replied(cl, m, now, &out)
	}
	t.unlock(now, &out)
}

// progressed moves cl on a progress message of value v.
func (t *table) progressed(cl *call, v string, m *nats.Msg, now time.Time, out *answers) {
	if !t.policy.liveness {
		return // a worker speaks rule 8 only to a call that asked
	}
	if v == schema.ProgressBusy {
		t.refusedBusy(cl, t.subjects.IsDirect(m.Header.Get(schema.HeaderDirect)), now, out)
		return
	}
	if v == schema.ProgressQuestion {
		t.questioned(cl, m)
	}
	if v == schema.ProgressReport && cl.c.Progress != nil {
		// A report the aggregator cannot read is still a sign of life;
		// only its content is dropped.
		if r, err := schema.UnmarshalProgress(m.Data); err == nil {
			cl.c.Progress(r.Percent, r.Message)
		}
	}
	cl.ackAt = 0
	cl.heardAt = momentOf(now)
	if cl.state == published {
		cl.state = running
		cl.watchQuiet = false
		if t.ackDelayHeader != nil {
			t.acks.acked(cl.method)
		}
	}
	// A beat only moves the silence later: the timers learn it when
	// they come to the call, rather than on every beat.
	if cl.index >= 0 && cl.nextDue(&t.policy) < cl.due {
		t.schedule(cl)
	}
}

// refusedBusy moves cl on a busy worker's refusal; named says the worker
// names its free slots (rule 10). Nothing of the call ran.
func (t *table) refusedBusy(cl *call, named bool, now time.Time, out *answers) {
	cl.ackAt, cl.heardAt = 0, 0
	cl.watchQuiet = false
	if cl.busy == nil {
		cl.busy = &busyRefusals{first: momentOf(now), backoff: busyBackoffMin, namedBackoff: busyBackoffMax}
	}
	// From now on the call's workers name the slots they free.
	if !cl.askedFree {
		t.askFree(cl)
	}
	if momentOf(now).sub(cl.busy.first) >= t.policy.busyWait {
		t.finish(cl, nil, workersBusy(cl.method, t.policy.busyWait), out)
		return
	}
	// Published again at once to a slot a reply named free, else at
	// the first one a reply names, or after the backoff, whichever comes
	// first.
	if to, ok := t.slots.take(cl.method, now); ok {
		if cl.state == refused {
			t.slots.leaveLine(cl)
		}
		t.resend(cl, now, to, out)
		if cl.state != answered {
			t.schedule(cl)
		}
		return
	}
	if cl.state != refused {
		cl.state = refused
		t.slots.refuse(cl, now)
	}
	if named {
		// The workers name their free slots: the backoff is only the
		// fallback, for a slot nobody names.
		cl.retryAt = momentOf(now).add(cl.busy.namedBackoff)
		cl.busy.namedBackoff = min(2*cl.busy.namedBackoff, namedFallbackMax)
	} else {
		cl.retryAt = momentOf(now).add(cl.busy.backoff)
		cl.busy.backoff = min(2*cl.busy.backoff, busyBackoffMax)
	}
	t.schedule(cl)
}

// readReply turns a reply message into the call's answer.
func readReply(method string, m *nats.Msg, attempts int) ([]byte, *schema.Error) {
	env, err := bus.ReadReply(m)
	if err != nil {
		if errors.Is(err, bus.ErrNoResponders) {
			if attempts > 1 {
				// The method had a worker for the first attempt; it is
				// gone now.
				return nil, schema.NewError(schema.CodeUnavailable, "unavailable: no worker left for "+method,
					map[string]any{"retryable": true, "reason": schema.ReasonNoResponders, "method": method, "attempts": attempts})
			}
			return nil, noResponders(method)
		}
		return nil, badReply(method, err)
	}
	if e := env.Err(); e != nil {
		return nil, e
	}
	return env.Result, nil
}

// replied moves cl on its reply.
func (t *table) replied(cl *call, m *nats.Msg, now time.Time, out *answers) {
	if cl.direct != "" && bus.NoResponders(m) {
		// The worker named by a free slot has gone, or NATS refused its
		// direct subscription: nothing ran, so the queue group has the
		// call again, and the slots that worker names are not believed
		// for a while.
		t.slots.markUnreachable(cl.direct, now)
		t.resend(cl, now, "", out)
		if cl.state != answered {
			t.schedule(cl)
		}
		return
	}
	if cl.attempts > 1 {
		// Another attempt may still be running somewhere.
		t.wire.cancel(cl.callID)
	} else if cl.state == published && t.ackDelayHeader != nil && momentOf(now).sub(cl.sentAt) >= t.ackDue(cl)+t.policy.ackTimeout {
		// Answered without an ack long after one was due: the worker
		// does not acknowledge, and a silent call of its method may be
		// one it runs.
		t.acks.unacked(cl.method, now)
	}
	result, e := readReply(cl.method, m, cl.attempts)
	t.finish(cl, result, e, out)
	// A reply names at most the one slot it frees (rule 10), and only
	// when its call asked: a worker must not draw calls it was not
	// offered, nor many at once.
	if !cl.askedFree {
		return
	}
	if d := m.Header.Get(schema.HeaderDirect); d != "" && t.subjects.IsDirect(d) {
		if n, err := strconv.Atoi(m.Header.Get(schema.HeaderFree)); err == nil && n > 0 {
			if w := t.slots.freed(cl.method, d, now); w != nil {
				t.resend(w, now, d, out)
				if w.state != answered {
					t.schedule(w)
				}
			}
		}
	}
}

// ackDue returns how long after its publication a worker that speaks
// rule 8 acknowledges cl at the latest.
func (t *table) ackDue(cl *call) time.Duration {
	if cl.delayed {
		return t.policy.ackDelay
	}
	return 0
}

// tick is the timer's handler: it moves every call that is due.
func (t *table) tick() {
	var out answers
	t.mu.Lock()
	now := t.now()
	at := momentOf(now)
	t.armedAt = 0
	for cl := t.timers.first(); cl != nil && cl.due <= at; cl = t.timers.first() {
		t.expire(cl, now, &out)
	}
	t.unlock(now, &out)
}

// expire moves cl, due at now. It leaves cl answered, or due later.
func (t *table) expire(cl *call, now time.Time, out *answers) {
	p := &t.policy
	at := momentOf(now)
	if at >= cl.deadline {
		// The worker holds the same deadline: no cancel message.
		t.finish(cl, nil, timedOut(cl.method, cl.timeout, ""), out)
		return
	}
	if due(cl.hedgeAt, at) {
		cl.hedgeAt = 0
		if cl.state == published || cl.state == running {
			if cl.attempts < p.maxAttempts {
				cl.attempts++
				// A hedge the bus cannot take now is dropped.
				if e := t.send(cl, now, ""); e != nil && e.Reason() != schema.ReasonBusDisconnected {
					t.finish(cl, nil, e, out)
					return
				}
			}
		}
	}
	if due(cl.ackAt, at) {
		cl.ackAt = 0
		if cl.state == published && cl.attempts < p.maxAttempts {
			cl.attempts++
			t.resend(cl, now, "", out)
			if cl.state == answered {
				return
			}
			t.log.Info("call not acknowledged, published again", "method", cl.method, "attempt", cl.attempts)
		}
	}
	if cl.state == published && cl.watchQuiet && due(cl.sentAt.add(p.quiet()), at) {
		cl.watchQuiet = false
		// A worker that acknowledges held the call no longer than the
		// delay without saying so: silent since, it is lost, as a worker
		// silent after its ack is. Once one of the method's workers was
		// seen not to acknowledge, the call is waited for.
		if t.acks.acknowledges(cl.method, now) {
			if !cl.safe || cl.attempts >= p.maxAttempts {
				t.log.Warn("worker lost a call before its ack was due", "method", cl.method, "id", string(cl.c.ID), "silence", p.quiet())
				t.acks.lostUnacked(cl.token, cl.method)
				t.finish(cl, nil, workerLost(cl.method, p.quiet(), cl.attempts), out)
				return
			}
			cl.attempts++
			t.resend(cl, now, "", out)
			if cl.state == answered {
				return
			}
			t.log.Info("worker lost a retry-safe call before its ack was due, published again", "method", cl.method, "attempt", cl.attempts)
		}
	}
	if cl.state == running && due(cl.heardAt.add(p.silence), at) {
		if !cl.safe || cl.attempts >= p.maxAttempts {
			t.log.Warn("worker lost a call", "method", cl.method, "id", string(cl.c.ID), "silence", p.silence)
			t.finish(cl, nil, workerLost(cl.method, p.silence, cl.attempts), out)
			return
		}
		cl.attempts++
		cl.heardAt = 0
		t.resend(cl, now, "", out)
		if cl.state == answered {
			return
		}
		t.log.Info("worker lost a retry-safe call, published again", "method", cl.method, "attempt", cl.attempts)
	}
	if due(cl.retryAt, at) {
		cl.retryAt = 0
		if cl.state == refused {
			t.slots.leaveLine(cl)
		}
		if cl.state == refused || cl.state == parked {
			t.resend(cl, now, "", out)
			if cl.state == answered {
				return
			}
		}
	}
	t.schedule(cl)
}

// due reports whether a timer armed at at has come at now.
func due(at, now moment) bool { return at != 0 && at <= now }

// cancel answers the calls of b still in the table, b's context having
// ended: a cancellation, announced to the workers (rule 7), or a timeout
// when the context's deadline passed. The calls held outside the table
// see the context themselves.
func (t *table) cancel(b *batch) {
	var out answers
	t.mu.Lock()
	e := func(cl *call) *schema.Error { return ctxError(b.ctx, cl.method, cl.timeout) }
	announce := !errorsIsDeadline(b.ctx)
	for i := range b.calls {
		cl := &b.calls[i]
		switch cl.state {
		case outside, answered:
			continue
		case queued, local:
			// Never published: no worker to tell. A local call's
			// handler has its context ended by finish.
		default:
			if announce {
				t.wire.cancel(cl.callID)
			}
		}
		t.finish(cl, nil, e(cl), &out)
	}
	t.unlock(t.now(), &out)
}

// size returns how many calls the table holds, and how many of them
// are timed.
func (t *table) size() (calls, timed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls), len(t.timers)
}

// errorsIsDeadline reports whether ctx ended at its deadline.
func errorsIsDeadline(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

// timers orders the calls of the table by when each is next due: its
// deadline, or sooner the end of its ack timeout, of its worker's
// silence, of its backoff or of its hedge delay ([call.next]). One
// time.Timer, re-armed to the first of them, serves them all. A call is
// in it at most once; its index is kept in the call. Not safe for
// concurrent use: the table's lock guards it.
type timers []*call

var _ heap.Interface = (*timers)(nil)

func (h timers) Len() int           { return len(h) }
func (h timers) Less(i, j int) bool { return h[i].due < h[j].due }
func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = int32(i)
	h[j].index = int32(j)
}

// Push implements [heap.Interface]; use set.
func (h *timers) Push(x any) {
	cl := x.(*call)
	cl.index = int32(len(*h))
	*h = append(*h, cl)
}

// Pop implements [heap.Interface]; use drop.
func (h *timers) Pop() any {
	old := *h
	n := len(old) - 1
	cl := old[n]
	old[n] = nil
	cl.index = -1
	*h = old[:n]
	return cl
}

// set makes cl due at due, in the heap or not yet.
func (h *timers) set(cl *call, due moment) {
	cl.due = due
	if cl.index < 0 {
		heap.Push(h, cl)
		return
	}
	heap.Fix(h, int(cl.index))
}

// drop takes cl out, when it is in.
func (h *timers) drop(cl *call) {
	if cl.index >= 0 {
		heap.Remove(h, int(cl.index))
	}
}

// first returns the call due first, or nil.
func (h timers) first() *call {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}
