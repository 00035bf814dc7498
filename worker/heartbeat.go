package worker

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Bounds of the heartbeat interval an aggregator may ask for; a value
// outside is brought inside rather than refused, so that a call is never
// lost over it.
const (
	minHeartbeat = 10 * time.Millisecond
	maxHeartbeat = time.Minute
)

// Bounds of the number of heartbeats in a row nobody heard after which a
// call is canceled as orphaned ([schema.HeaderHeartbeatMisses]); a value
// outside is brought inside. The default is the aggregator's default
// patience: after it, an ingress that cannot hear a call has given up on
// it, or is gone.
const (
	defaultMisses = 3
	maxMisses     = 1000
)

// beat sends the progress messages of one call to the aggregator that asked
// for them with [schema.HeaderHeartbeat]: an ack when the call starts (or
// once it has run for the [schema.HeaderAckDelay] the aggregator allows,
// so that a short call sends none), a heartbeat every interval while it
// runs, or a busy refusal instead of either. While the call runs, its ack and heartbeats also probe whether
// anyone still listens on the reply subject (see [probes]); after
// misses of them in a row found nobody, the call is canceled with
// [ErrCallerGone]. A nil *beat (nobody asked) sends nothing. Its methods
// are safe for concurrent use.
type beat struct {
	nc       *nats.Conn
	reply    string
	interval time.Duration
	misses   uint64
	probes   *probes
	// ackDelay is how long the ack may be held back
	// ([schema.HeaderAckDelay]); zero for an ack at once.
	ackDelay time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	// acked is set once a progress message has left: the ack, or a report
	// sent before the ack was due, which stands in for it.
	acked bool
	// probing is set by start: from then on each progress message asks
	// NATS whether anyone still listens. token names the call in the
	// probe replies; empty until the first of them.
	probing bool
	token   string
	// gone cancels the call once nobody listens any more.
	gone func()
	// seq numbers the probing messages. It skips a number whenever the
	// runtime's own connection is down, or came back since the previous
	// message, so that no streak of missed messages spans an outage of the
	// worker's connection: only silence measured while the worker is
	// connected counts against the caller.
	seq        uint64
	reconnects uint64
	streak     missStreak
	// lastReport is when the latest progress report left; pending, when
	// not nil, is the body of a newer one held back until ProgressInterval
	// has passed since, by reportTimer.
	lastReport  time.Time
	pending     []byte
	reportTimer *time.Timer
	// question, when not nil, is the question the handler waits on
	// (rule 11): it goes again in place of a beat every questionRepeat
	// intervals, in case it or its answer was lost; sinceQuestion counts
	// the intervals since it last went.
	question      *pendingQuestion
	sinceQuestion int
}

// pendingQuestion is a question a handler waits on: the subject of its
// answer and its body.
type pendingQuestion struct {
	answerSubject string
	body          []byte
}

// questionRepeat is how many heartbeat intervals pass between two sendings
// of a question that waits for its answer: often enough that a question
// or an answer that NATS lost costs seconds, rarely enough that a question
// waiting for a person an hour costs little.
const questionRepeat = 10

// ProgressInterval is the shortest time between two progress reports of
// one call ([Progress]); a newer report replaces one held back.
const ProgressInterval = 100 * time.Millisecond

// heartbeat returns the beat of msg, or nil when msg asks for none: a
// notification, or a call from an aggregator that does not speak the
// liveness protocol.
func (rt *Runtime) heartbeat(msg *nats.Msg) *beat {
	if msg.Reply == "" {
		return nil
	}
	v := msg.Header.Get(schema.HeaderHeartbeat)
	if v == "" {
		return nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return nil
	}
	d := min(max(time.Duration(ms)*time.Millisecond, minHeartbeat), maxHeartbeat)
	misses := uint64(defaultMisses)
	if n, err := strconv.ParseUint(msg.Header.Get(schema.HeaderHeartbeatMisses), 10, 64); err == nil && n > 0 {
		misses = min(n, maxMisses)
	}
	b := &beat{nc: rt.nc, reply: msg.Reply, interval: d, misses: misses, probes: rt.probes}
	if v := msg.Header.Get(schema.HeaderAckDelay); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			// Never held back longer than a heartbeat interval: the
			// aggregator's patience is counted in those.
			b.ackDelay = min(time.Duration(ms)*time.Millisecond, d)
		}
	}
	return b
}

// live reports whether the aggregator speaks the liveness protocol, and
// so understands a busy refusal.
func (b *beat) live() bool { return b != nil }

// send publishes one progress message, probing when the call runs. b.mu
// must be held, except for a busy refusal, which never probes. A failure
// is not worth a log line: the aggregator notices the silence, which is
// the point.
func (b *beat) send(v string) { b.sendBody(v, nil) }

// sendBody is [beat.send] with a body, which only a report has.
func (b *beat) sendBody(v string, body []byte) {
	b.sendMsg(&nats.Msg{Subject: b.reply, Header: nats.Header{schema.HeaderProgress: []string{v}}, Data: body})
}

// sendMsg publishes msg, a progress message on the reply subject,
// probing when the call runs. b.mu must be held.
func (b *beat) sendMsg(msg *nats.Msg) {
	if b.probing {
		if b.token == "" {
			// Registered with the first message that can probe: a call
			// answered within its ack delay sends none and costs none.
			b.token = b.probes.watch(b)
		}
		if b.nc.IsConnected() {
			if rc := b.nc.Stats().Reconnects; rc != b.reconnects {
				b.reconnects = rc
				b.seq++
			}
			b.seq++
			msg.Reply = b.probes.subject(b.token, b.seq)
		} else {
			// Sent when the connection is back, too late to tell
			// anything: no probe, and a gap in the numbers.
			b.seq++
		}
	}
	_ = b.nc.PublishMsg(msg)
}

// busy refuses the call: the worker has no room for it. direct, when not
// empty, is the runtime's direct subject: it tells the aggregator that
// this worker names its free slots on its replies (rule 10), so that the
// refused call may wait for one rather than be published again soon.
func (b *beat) busy(direct string) {
	if b == nil {
		return
	}
	msg := &nats.Msg{Subject: b.reply, Header: nats.Header{schema.HeaderProgress: []string{schema.ProgressBusy}}}
	if direct != "" {
		msg.Header[schema.HeaderDirect] = []string{direct}
	}
	_ = b.nc.PublishMsg(msg)
}

// start acknowledges the call and sends a heartbeat every interval until
// stop; gone is called, once, if nobody listens for the call's answer any
// more.
func (b *beat) start(gone func()) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.gone = gone
	b.reconnects = b.nc.Stats().Reconnects
	b.probing = true
	if b.ackDelay > 0 {
		// The ack waits: a call answered before it is due sends none.
		b.timer = time.AfterFunc(b.ackDelay, b.tick)
		return
	}
	b.send(schema.ProgressAck)
	b.acked = true
	b.timer = time.AfterFunc(b.interval, b.tick)
}

func (b *beat) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	switch {
	case !b.acked:
		b.send(schema.ProgressAck)
		b.acked = true
	case b.question != nil:
		if b.sinceQuestion++; b.sinceQuestion >= questionRepeat {
			b.sendQuestionLocked()
		} else {
			b.send(schema.ProgressBeat)
		}
	default:
		b.send(schema.ProgressBeat)
	}
	b.timer.Reset(b.interval)
}

// ask sends a question of the running call (rule 11): the progress
// message "question" with the answer subject in
// [schema.HeaderAskReply] and body, a [schema.Question]. The question is
// sent again every questionRepeat intervals in place of a beat until
// [beat.settle]. Like a report, it comes after the ack and counts as a
// sign of life. It reports false when the call sends no more progress
// messages (nobody listens for it any more).
func (b *beat) ask(subject string, body []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.timer == nil {
		return false
	}
	if !b.acked {
		b.send(schema.ProgressAck)
		b.acked = true
	}
	b.question = &pendingQuestion{answerSubject: subject, body: body}
	b.sendQuestionLocked()
	b.timer.Reset(b.interval)
	return true
}

// sendQuestionLocked sends b.question. b.mu must be held.
func (b *beat) sendQuestionLocked() {
	b.sinceQuestion = 0
	b.sendMsg(&nats.Msg{Subject: b.reply, Data: b.question.body, Header: nats.Header{
		schema.HeaderProgress: []string{schema.ProgressQuestion},
		schema.HeaderAskReply: []string{b.question.answerSubject},
	}})
}

// settle ends the sending of the question: it has its answer, or the
// handler stopped waiting.
func (b *beat) settle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.question = nil
}

// report sends a progress report of the running call, or holds it back
// until [ProgressInterval] has passed since the previous one. A report is
// a sign of life, so the next heartbeat is due an interval after it.
func (b *beat) report(percent float64, message string) {
	body := schema.MarshalProgress(percent, message)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.timer == nil {
		return // not started, or already answered
	}
	if wait := ProgressInterval - time.Since(b.lastReport); wait > 0 {
		if b.pending == nil {
			if b.reportTimer == nil {
				b.reportTimer = time.AfterFunc(wait, b.flush)
			} else {
				b.reportTimer.Reset(wait)
			}
		}
		b.pending = body
		return
	}
	b.sendReportLocked(body)
}

// flush sends the report held back, if the call still runs.
func (b *beat) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.pending == nil {
		return
	}
	b.sendReportLocked(b.pending)
}

func (b *beat) sendReportLocked(body []byte) {
	b.pending = nil
	b.lastReport = time.Now()
	if !b.acked {
		// The aggregator takes any progress message for the ack; the
		// report must still not come before it.
		b.send(schema.ProgressAck)
		b.acked = true
	}
	b.sendBody(schema.ProgressReport, body)
	if b.timer != nil {
		b.timer.Reset(b.interval)
	}
}

// foundNobody records that probing message seq found nobody subscribed to the
// reply subject, and cancels the call when that makes b.misses in a row.
// The heartbeats stop then: nobody would hear them.
func (b *beat) foundNobody(seq uint64) {
	b.mu.Lock()
	if b.stopped || b.streak.missed(seq) < b.misses {
		b.mu.Unlock()
		return
	}
	b.stopLocked()
	gone := b.gone
	b.mu.Unlock()
	gone()
}

// stop ends the heartbeats; none is sent after stop returns.
func (b *beat) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}

func (b *beat) stopLocked() {
	if b.stopped {
		return
	}
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.reportTimer != nil {
		b.reportTimer.Stop()
	}
	if b.token != "" {
		b.probes.forget(b.token)
	}
}

// ErrCallerGone is the cause of a handler's context (see
// context.Cause) when nobody listens for the call's answer any more: the
// ingress that sent it died or closed its connection, so the answer
// could reach no one. A handler that sees it may stop at once; whatever
// it answers is dropped.
var ErrCallerGone = errors.New("worker: nobody listens for the call's answer any more")

// probes learns, for the calls that asked for heartbeats, whether anyone
// still listens on their reply subjects. Each progress message of such a
// call carries a reply subject of the runtime's own, one per message
// (prefix, the call's token, a sequence number); when nobody is subscribed
// to the call's reply subject, NATS answers that reply subject with its
// no-responders message, which names the call and the message. A
// delivered progress message gets no answer at all.
type probes struct {
	prefix string // the runtime's inbox and a dot
	// sub receives the no-responders messages; set by Start under
	// Runtime.mu, nil before and after.
	sub *nats.Subscription
	// beats maps the token of each call being probed to its *beat.
	beats sync.Map
}

func newProbes(nc *nats.Conn) *probes {
	return &probes{prefix: nc.NewInbox() + "."}
}

// subject is the reply subject of the seq'th probing message of the call
// with token.
func (p *probes) subject(token string, seq uint64) string {
	return p.prefix + token + "." + strconv.FormatUint(seq, 10)
}

// watch registers b and returns the token of its reply subjects.
func (p *probes) watch(b *beat) string {
	token := nuid.Next()
	p.beats.Store(token, b)
	return token
}

func (p *probes) forget(token string) { p.beats.Delete(token) }

// deliver hands a no-responders message to the call it names.
func (p *probes) deliver(msg *nats.Msg) {
	if !bus.NoResponders(msg) {
		return // nothing else is ever sent here
	}
	token, seq, ok := strings.Cut(strings.TrimPrefix(msg.Subject, p.prefix), ".")
	if !ok {
		return
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return
	}
	if b, ok := p.beats.Load(token); ok {
		b.(*beat).foundNobody(n)
	}
}

// subscribeProbes subscribes to the runtime's probe replies. rt.mu must be
// held.
func (rt *Runtime) subscribeProbes() error {
	sub, err := rt.nc.Subscribe(rt.probes.prefix+"*.*", rt.probes.deliver)
	if err != nil {
		return err
	}
	rt.probes.sub = sub
	return nil
}

// stopProbes ends the probe subscription once no call runs any more.
func (rt *Runtime) stopProbes() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.unsubscribeProbes()
}

// unsubscribeProbes ends the probe subscription. rt.mu must be held.
func (rt *Runtime) unsubscribeProbes() {
	sub := rt.probes.sub
	rt.probes.sub = nil
	if sub != nil {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			rt.log.Warn("unsubscribe from probe replies", "err", err)
		}
	}
}

// missStreak counts the latest unbroken streak of probing messages of one
// call that found nobody listening. The zero value has seen none.
type missStreak struct{ first, last uint64 }

// missed records that message seq found nobody listening and returns
// the length of the streak it ends. Messages are numbered from 1; a number
// that does not follow the last one starts a new streak, since the messages
// in between were delivered (or never probed).
func (r *missStreak) missed(seq uint64) uint64 {
	if r.last == 0 || seq != r.last+1 {
		r.first = seq
	}
	r.last = seq
	return r.last - r.first + 1
}
