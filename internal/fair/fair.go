package fair

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of [Config].
const (
	// DefaultSeats is the entries worked on at once: enough calls in
	// flight to keep an ingress, the bus and its workers busy, few enough
	// that a call entering the window waits behind a few milliseconds of
	// others.
	DefaultSeats = 128
	// DefaultHoldMin and DefaultHoldMax bound the hold: how long an entry
	// keeps its seat without an answer before it counts as waiting on a
	// worker. An entry answered within DefaultHoldMax counts as work.
	DefaultHoldMin = time.Millisecond
	DefaultHoldMax = 50 * time.Millisecond
	// DefaultFlowMaxQueued is the cost one flow may have queued: ten
	// batches of a thousand small calls, as many as an ingress lets be in
	// flight by default.
	DefaultFlowMaxQueued = 10000
	// DefaultRound is the entries the window takes between two network
	// polls while flows compete: on one saturated core, a lone caller
	// kept about half its call rate under another's echo flood at 8, a
	// third at 16, and two thirds at 4 (BENCHMARKS.md, "Rounds").
	DefaultRound = 8
	// MaxWeight is the largest weight of a flow.
	MaxWeight = 1000
)

// CostUnit is the params bytes that cost as much as a call: parsing and
// copying 16 KiB of JSON takes the ingress about as long as a small
// call's whole trip through it.
const CostUnit = 16 << 10

// holdFactor is how many times the average time in a seat of the entries
// answered there the hold is: a call of the same kind held up a little
// longer than usual keeps its seat.
const holdFactor = 4

// estimateWeight is the weight of a new sample in the moving average of
// seat times (1/8, as TCP smooths round-trip times).
const estimateWeight = 1.0 / 8

// Cost returns the cost of a call whose params take paramBytes: 1, and
// one more per whole [CostUnit], so that calls of small params cost 1
// each.
func Cost(paramBytes int) float64 { return float64(1 + max(paramBytes, 0)/CostUnit) }

// BodyCost returns the cost of a body of n bytes waiting to be parsed.
func BodyCost(n int) float64 { return float64(n) / CostUnit }

// Config is the window and queues of a [Scheduler]. The zero value is
// valid: every zero field takes its default.
type Config struct {
	// Seats is how many entries are worked on at once (default
	// [DefaultSeats]).
	Seats int
	// HoldMin and HoldMax bound the hold (defaults [DefaultHoldMin] and
	// [DefaultHoldMax]); equal, they fix it.
	HoldMin, HoldMax time.Duration
	// FlowMaxQueued is the cost one flow may have queued (default
	// [DefaultFlowMaxQueued]). An entry larger than it is still taken
	// into an empty queue.
	FlowMaxQueued int
	// CPUTarget is the share of the process's CPUs that the work the
	// window admits may take while more than one flow is active (0:
	// [DefaultCPUTarget]; 1 turns pacing off). Pacing needs the
	// process's CPU time: see [Scheduler.MeasureCPU] and the package doc's "Pacing".
	CPUTarget float64
	// Round is how many entries the window takes between two network
	// polls of the process while more than one flow is active (default
	// [DefaultRound]; below 0, no bound): see the package doc's "Rounds".
	Round int
}

// Validate reports a negative field, or a HoldMax below HoldMin, naming
// the setting.
func (c Config) Validate() error {
	switch {
	case c.Seats < 0:
		return fmt.Errorf("fair: seats must not be negative, got %d", c.Seats)
	case c.HoldMin < 0 || c.HoldMax < 0:
		return fmt.Errorf("fair: hold bounds must not be negative, got %v and %v", c.HoldMin, c.HoldMax)
	case c.FlowMaxQueued < 0:
		return fmt.Errorf("fair: flow max queued must not be negative, got %d", c.FlowMaxQueued)
	case c.CPUTarget < 0 || c.CPUTarget > 1:
		return fmt.Errorf("fair: the CPU target must be a share from 0 to 1, got %v", c.CPUTarget)
	}
	c = c.withDefaults()
	if c.HoldMax < c.HoldMin {
		return fmt.Errorf("fair: the longest hold %v is below the shortest %v", c.HoldMax, c.HoldMin)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Seats == 0 {
		c.Seats = DefaultSeats
	}
	if c.HoldMin == 0 {
		c.HoldMin = DefaultHoldMin
		if c.HoldMax > 0 {
			c.HoldMin = min(c.HoldMin, c.HoldMax)
		}
	}
	if c.HoldMax == 0 {
		c.HoldMax = max(DefaultHoldMax, c.HoldMin)
	}
	if c.FlowMaxQueued == 0 {
		c.FlowMaxQueued = DefaultFlowMaxQueued
	}
	if c.Round == 0 {
		c.Round = DefaultRound
	}
	return c
}

// ErrQueueFull means a flow's queue holds all the cost it may.
var ErrQueueFull = errors.New("fair: the flow's queue is full")

// Flow is who an entry is for.
type Flow struct {
	// Name tells flows apart; the empty name is a flow like any other.
	Name string
	// Weight is the flow's shares of the window while other flows are
	// busy too; zero means 1. It must not exceed [MaxWeight].
	Weight float64
	// Exempt flows never wait.
	Exempt bool
}

// CheckWeight reports a weight a [Flow] may not have.
func CheckWeight(w float64) error {
	if math.IsNaN(w) || w < 0 || w > MaxWeight {
		return fmt.Errorf("fair: a weight must be between 0 (meaning 1) and %d, got %v", MaxWeight, w)
	}
	return nil
}

// state is where an entry is.
type state uint8

const (
	fresh    state = iota // not given to the scheduler yet
	queued                // in its flow's queue
	seated                // in the window, being worked on
	waiting               // in the window past its hold, waiting on a worker
	finished              // answered, expired, canceled or refused
)

// Entry is one unit of work: a call, or a body to parse. Fill in its
// exported fields and give it to [Scheduler.Enqueue]; it is the
// scheduler's until it comes back expired, is canceled, or is done
// ([Scheduler.Done]).
type Entry[T any] struct {
	// Value is the owner's, carried unchanged.
	Value T
	// Cost is the entry's share of work (see [Cost]); below 0 counts
	// as 0.
	Cost float64
	// Deadline is when the entry stops being worth admitting; zero
	// means never.
	Deadline time.Time
	// Untimed marks an entry whose time in a seat says nothing of how
	// long calls take (a body being parsed): it does not move the hold.
	Untimed bool

	flow          *flow[T] // nil for an exempt flow's
	state         state
	start, finish float64
	seq           uint64
	enqueued      time.Time
	admitted      time.Time
	dl            int // index in the deadline heap; -1 when not in it
	// prev and next link the seated entries in order of admission.
	prev, next *Entry[T]
}

// Enqueued returns when the entry was queued.
func (e *Entry[T]) Enqueued() time.Time { return e.enqueued }

// Admitted returns when the entry entered the window; zero before.
func (e *Entry[T]) Admitted() time.Time { return e.admitted }

// Moves are the entries a change let into the window and those that
// expired in their queues, for the owner to act on.
type Moves[T any] struct {
	Admitted []*Entry[T]
	Expired  []*Entry[T]
	// AwaitPoll says that the round is over and queued entries wait for
	// [Scheduler.Polled]: the owner calls it after the process's next
	// network poll.
	AwaitPoll bool
}

// flow is the scheduler's state of one flow: its queue, and what it has
// in the window.
type flow[T any] struct {
	name   string
	weight float64
	// queue holds the flow's entries in order from head on. A canceled
	// entry stays in place, finished, until it reaches the head.
	queue  []*Entry[T]
	head   int
	cost   float64 // of the queued entries
	n      int     // queued entries
	inside int     // entries in the window
	// lastFinish is the finish tag of the flow's last queued entry.
	lastFinish float64
	hi         int // index in the heap of busy flows; -1 when idle
}

// Scheduler holds the queues and the window. Its methods are safe for
// concurrent use; none blocks or calls out.
type Scheduler[T any] struct {
	cfg Config

	mu    sync.Mutex
	flows map[string]*flow[T]
	// sweepAt is the size of flows at which a new flow sweeps out the
	// idle ones ([Scheduler.sweepIdle]).
	sweepAt   int
	busy      flowHeap[T]
	deadlines deadlineHeap[T]
	// first and last are the seated entries, oldest first.
	first, last *Entry[T]
	used        int // seated entries
	waitingN    int // entries past their hold
	virtual     float64
	seq         uint64
	estimate    time.Duration // moving average of seat times
	pace        pacer
	// round is how many entries were admitted since the last poll while
	// flows competed; gated is set when that reached the round's bound.
	round int
	gated bool
	// rounds counts the rounds that ended in a wait for a poll.
	rounds uint64
	// lastName is the flow admitted last, at lastAt; otherAt is when a
	// flow other than it was last admitted (zero: none yet).
	lastName        string
	lastAt, otherAt time.Time
	lastSet         bool
}

// New returns a scheduler of cfg, with every queue empty.
func New[T any](cfg Config) (*Scheduler[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scheduler[T]{cfg: cfg.withDefaults(), flows: map[string]*flow[T]{}}, nil
}

// Config returns the scheduler's configuration, defaults filled in.
func (s *Scheduler[T]) Config() Config { return s.cfg }

// Enqueue queues entries for f, in order, at now, and lets into the
// window what fits. It returns how many it queued: entries[n:] did not
// fit in f's queue (see [ErrQueueFull]) and are not the scheduler's.
// The entries of an exempt flow are all admitted at once.
func (s *Scheduler[T]) Enqueue(now time.Time, f Flow, entries []*Entry[T]) (n int, m Moves[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Exempt {
		for _, e := range entries {
			e.enqueued, e.dl = now, -1
			s.seat(e, now)
			m.Admitted = append(m.Admitted, e)
		}
		return len(entries), m
	}
	fl := s.flowOf(f)
	for _, e := range entries {
		cost := max(e.Cost, 0)
		if fl.n > 0 && fl.cost+cost > float64(s.cfg.FlowMaxQueued) {
			break
		}
		start := fl.lastFinish
		if fl.n == 0 {
			start = max(start, s.virtual)
		}
		s.seq++
		e.flow, e.state, e.start, e.finish, e.seq, e.enqueued, e.dl = fl, queued, start, start+cost/fl.weight, s.seq, now, -1
		fl.lastFinish = e.finish
		fl.queue = append(fl.queue, e)
		fl.cost += cost
		fl.n++
		if !e.Deadline.IsZero() {
			heap.Push(&s.deadlines, e)
		}
		if fl.hi < 0 {
			heap.Push(&s.busy, fl)
		}
		n++
		if s.used < s.cfg.Seats {
			// What the window takes at once does not count against the
			// queue's bound.
			s.admit(now, &m)
		}
	}
	s.forget(fl)
	s.admit(now, &m)
	return n, m
}

// AdmitAlone lets all of entries into the window at now, for f, when f
// is alone: no flow has anything queued, no other flow was admitted
// lately (they do not compete), no round waits for a poll, pacing is off
// ([Config.CPUTarget] 1, or no CPU measured), and the free seats take
// them all. It reports whether it did;
// when it did not, entries are untouched and the owner queues them
// ([Scheduler.Enqueue]). What it admits is what Enqueue would have
// admitted at once, with the same tags and counts, without passing
// through the queue: a caller alone pays for no queue. An entry whose
// deadline has come, and an exempt flow, are left to Enqueue.
func (s *Scheduler[T]) AdmitAlone(now time.Time, f Flow, entries []Entry[T]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Exempt || len(s.busy) > 0 || s.used+len(entries) > s.cfg.Seats || s.pacing() {
		return false
	}
	s.unround(now)
	if s.gated || s.competing(now) || s.lastSet && f.Name != s.lastName && now.Sub(s.lastAt) <= activeSpan {
		return false
	}
	for i := range entries {
		if d := entries[i].Deadline; !d.IsZero() && !now.Before(d) {
			return false
		}
	}
	fl := s.flowOf(f)
	for i := range entries {
		e := &entries[i]
		// The flow's queue is empty, as every queue is: its entry starts
		// at the virtual time or after its last.
		start := max(fl.lastFinish, s.virtual)
		s.seq++
		e.flow, e.start, e.finish, e.seq, e.enqueued, e.dl = fl, start, start+max(e.Cost, 0)/fl.weight, s.seq, now, -1
		fl.lastFinish = e.finish
		if s.cfg.Round > 0 {
			s.counted(now, fl.name)
		}
		fl.inside++
		s.virtual = max(s.virtual, e.start)
		s.seat(e, now)
	}
	return true
}

// flowOf returns the flow of f, made the first time, with f's weight.
func (s *Scheduler[T]) flowOf(f Flow) *flow[T] {
	fl := s.flows[f.Name]
	if fl == nil {
		s.sweepIdle()
		fl = &flow[T]{name: f.Name, hi: -1}
		s.flows[f.Name] = fl
	}
	fl.weight = f.Weight
	if !(fl.weight > 0) { // zero, negative or NaN
		fl.weight = 1
	}
	fl.weight = min(fl.weight, MaxWeight)
	return fl
}

// Done gives back the seat of an entry that was admitted, once it is
// answered. An entry answered within HoldMax of its admission, in its
// seat or after, was work: it teaches the hold how long work takes. Done
// of an entry that is not in the window does nothing, so that an owner
// may call it again to be sure.
func (s *Scheduler[T]) Done(now time.Time, e *Entry[T]) Moves[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m Moves[T]
	switch e.state {
	case seated:
		s.unseat(e)
	case waiting:
		s.waitingN--
	default:
		return m
	}
	if took := max(now.Sub(e.admitted), 0); !e.Untimed && took <= s.cfg.HoldMax {
		s.estimate += time.Duration(float64(took-s.estimate) * estimateWeight)
	}
	e.state = finished
	if fl := e.flow; fl != nil {
		fl.inside--
		s.forget(fl)
	}
	s.admit(now, &m)
	return m
}

// Cancel takes e out of its queue and reports whether it was there; an
// entry that was admitted or has expired is left as it is.
func (s *Scheduler[T]) Cancel(now time.Time, e *Entry[T]) (bool, Moves[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m Moves[T]
	if e.state != queued {
		return false, m
	}
	s.unqueue(e)
	s.admit(now, &m)
	return true, m
}

// Tick moves the window to now: the seated entries past their hold start
// waiting, the queued ones past their deadline expire, and the freed
// seats are taken.
func (s *Scheduler[T]) Tick(now time.Time) Moves[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m Moves[T]
	s.release(now)
	for len(s.deadlines) > 0 && !now.Before(s.deadlines[0].Deadline) {
		e := s.deadlines[0]
		s.unqueue(e)
		m.Expired = append(m.Expired, e)
	}
	s.admit(now, &m)
	return m
}

// release makes the seated entries past their hold at now wait, which
// frees their seats.
func (s *Scheduler[T]) release(now time.Time) {
	hold := s.hold()
	for e := s.first; e != nil && now.Sub(e.admitted) >= hold; e = s.first {
		s.unseat(e)
		e.state = waiting
		s.waitingN++
	}
}

// NextWake returns when [Scheduler.Tick] has something to do next: the
// oldest seated entry's hold ends while an entry is queued (the seat it
// frees lets one in), or a queued entry's deadline comes. ok is false
// when neither will happen. With nothing queued, a hold that ends is no
// reason to wake, so that a caller alone is not woken for it call after
// call: once an entry is queued, NextWake gives the hold's end again
// (passed already, when it ended meanwhile).
func (s *Scheduler[T]) NextWake() (t time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first != nil && len(s.busy) > 0 {
		t, ok = s.first.admitted.Add(s.hold()), true
	}
	if len(s.deadlines) > 0 {
		if d := s.deadlines[0].Deadline; !ok || d.Before(t) {
			t, ok = d, true
		}
	}
	// While a round waits for a poll the pace's tokens do not fill (no
	// admission takes them), so the next token is not a time to wake.
	if d, paced := s.nextToken(); paced && !s.gated && (!ok || d.Before(t)) {
		t, ok = d, true
	}
	return t, ok
}

// RetryAfter returns how long the flow named name might wait, when its
// entry did not fit, before it sends again: about the time its queue takes
// to drain by half at its share of the window now. It is at least a
// millisecond.
func (s *Scheduler[T]) RetryAfter(name string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	fl := s.flows[name]
	if fl == nil {
		return time.Millisecond
	}
	var weights float64
	for _, b := range s.busy {
		weights += b.weight
	}
	share := fl.weight / max(weights, fl.weight)
	// An entry holds its seat for about the estimate, and at most the
	// hold.
	per := min(max(s.estimate, time.Millisecond), s.hold())
	d := time.Duration(fl.cost / 2 / (float64(s.cfg.Seats) * share) * float64(per))
	return max(d, time.Millisecond)
}

// Hold returns how long an entry keeps its seat without an answer now.
func (s *Scheduler[T]) Hold() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hold()
}

func (s *Scheduler[T]) hold() time.Duration {
	return min(max(holdFactor*s.estimate, s.cfg.HoldMin), s.cfg.HoldMax)
}

// FlowStats is what one flow has queued and in the window.
type FlowStats struct {
	Name   string
	Weight float64
	// Queued is the entries in the flow's queue, and QueuedCost their
	// cost.
	Queued     int
	QueuedCost float64
	// Inside is the flow's entries in the window, seated or waiting.
	Inside int
}

// Stats is a snapshot of a [Scheduler].
type Stats struct {
	// Seats is the window's size; Used the seats taken (an exempt
	// flow's entries may take more than Seats).
	Seats, Used int
	// Waiting is the entries past their hold, waiting on a worker.
	Waiting int
	// Hold is the hold now.
	Hold time.Duration
	// Rounds is how many rounds ended in a wait for a network poll so
	// far (see the package doc's "Rounds").
	Rounds uint64
	// Flows are the flows with entries queued or in the window, in no
	// order; exempt flows are not among them.
	Flows []FlowStats
}

// Stats returns a snapshot of the window at now and of every flow that
// has anything queued or in it. A seated entry past its hold at now counts
// as waiting, though the window releases its seat only when it next needs
// one ([Scheduler.NextWake]).
func (s *Scheduler[T]) Stats(now time.Time) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Seats: s.cfg.Seats, Used: s.used, Waiting: s.waitingN, Hold: s.hold(), Rounds: s.rounds}
	for e := s.first; e != nil && now.Sub(e.admitted) >= st.Hold; e = e.next {
		st.Used--
		st.Waiting++
	}
	for _, fl := range s.flows {
		if fl.idle() {
			continue
		}
		st.Flows = append(st.Flows, FlowStats{Name: fl.name, Weight: fl.weight, Queued: fl.n, QueuedCost: fl.cost, Inside: fl.inside})
	}
	return st
}

// Polled tells s that the process has polled the network since it last
// set [Moves.AwaitPoll]: a new round starts, and the window takes what
// fits.
func (s *Scheduler[T]) Polled(now time.Time) Moves[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m Moves[T]
	s.round, s.gated = 0, false
	s.admit(now, &m)
	return m
}

// Competing reports whether flows compete at now, so that the window
// works in rounds (see the package doc's "Rounds").
func (s *Scheduler[T]) Competing(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Round > 0 && s.competing(now)
}

// competing reports whether more than one flow is queued, or one other
// than the flow admitted last was admitted within activeSpan.
func (s *Scheduler[T]) competing(now time.Time) bool {
	return len(s.busy) > 1 || !s.otherAt.IsZero() && now.Sub(s.otherAt) <= activeSpan
}

// roundOver reports whether admitting an entry of the flow named name at
// now would take the round past its bound.
func (s *Scheduler[T]) roundOver(now time.Time, name string) bool {
	r := s.cfg.Round
	if r <= 0 || s.round < r {
		return false
	}
	if s.lastSet && name != s.lastName && now.Sub(s.lastAt) <= activeSpan {
		return true // admitted, it would compete with the flow admitted last
	}
	return s.competing(now)
}

// counted records the admission of an entry of the flow named name at
// now: the flows admitted lately, and the round while they compete.
func (s *Scheduler[T]) counted(now time.Time, name string) {
	if s.lastSet && name != s.lastName {
		s.otherAt = s.lastAt
	}
	s.lastName, s.lastAt, s.lastSet = name, now, true
	if s.competing(now) {
		s.round++
	}
}

// unround ends the round, and lifts its gate, when the flows no longer
// compete: a flow alone is never held for a poll.
func (s *Scheduler[T]) unround(now time.Time) {
	if s.cfg.Round > 0 && (s.round > 0 || s.gated) && !s.competing(now) {
		s.round, s.gated = 0, false
	}
}

// admit fills the free seats from the busy flows in order of start tag;
// a head whose deadline has come expires instead.
func (s *Scheduler[T]) admit(now time.Time, m *Moves[T]) {
	s.unround(now)
	if s.gated {
		m.AwaitPoll = len(s.busy) > 0
		return
	}
	paced := s.pacing()
	if paced {
		s.steer(now)
	}
	for s.used < s.cfg.Seats && len(s.busy) > 0 {
		fl := s.busy[0]
		e := fl.queue[fl.head]
		if !e.Deadline.IsZero() && !now.Before(e.Deadline) {
			s.unqueue(e)
			m.Expired = append(m.Expired, e)
			continue
		}
		if s.roundOver(now, fl.name) {
			s.gated, m.AwaitPoll = true, true
			s.rounds++
			return
		}
		if paced && !s.take(now, fl.name) {
			return
		}
		if s.cfg.Round > 0 {
			s.counted(now, fl.name)
		}
		fl.inside++ // before unqueue, which forgets a flow with nothing left
		s.unqueue(e)
		s.virtual = max(s.virtual, e.start)
		s.seat(e, now)
		m.Admitted = append(m.Admitted, e)
	}
}

// seat puts e in the window at now, after the entries seated before it.
func (s *Scheduler[T]) seat(e *Entry[T], now time.Time) {
	e.state, e.admitted = seated, now
	e.prev, e.next = s.last, nil
	if s.last != nil {
		s.last.next = e
	} else {
		s.first = e
	}
	s.last = e
	s.used++
}

// unseat takes the seated e out of its seat.
func (s *Scheduler[T]) unseat(e *Entry[T]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.first = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.last = e.prev
	}
	e.prev, e.next = nil, nil
	s.used--
}

// unqueue takes the queued e out of its queue, as finished, and keeps its
// flow's place among the busy flows right.
func (s *Scheduler[T]) unqueue(e *Entry[T]) {
	fl := e.flow
	e.state = finished
	if e.dl >= 0 {
		heap.Remove(&s.deadlines, e.dl)
	}
	fl.cost -= max(e.Cost, 0)
	fl.n--
	if fl.n == 0 {
		fl.cost = 0 // no rounding left over
		clear(fl.queue)
		fl.queue, fl.head = fl.queue[:0], 0
		heap.Remove(&s.busy, fl.hi)
		s.forget(fl)
		return
	}
	for fl.queue[fl.head].state != queued {
		fl.queue[fl.head] = nil
		fl.head++
	}
	if fl.head > len(fl.queue)/2 {
		// Give the room behind the head back to the queue.
		k := copy(fl.queue, fl.queue[fl.head:])
		clear(fl.queue[k:])
		fl.queue, fl.head = fl.queue[:k], 0
	}
	heap.Fix(&s.busy, fl.hi)
}

// forget makes a flow with nothing queued or in the window idle: it is
// then as a new flow would be (its finish tag forgotten), but stays in
// the map, so that a caller with one call at a time does not make and
// drop its flow for each call. Idle flows are swept out once the map
// holds [idleFlowsSwept] flows or more ([Scheduler.sweepIdle]).
func (s *Scheduler[T]) forget(fl *flow[T]) {
	if fl.n == 0 && fl.inside == 0 {
		fl.lastFinish = 0
		if cap(fl.queue) > keptQueue {
			fl.queue = nil // a flood's queue is not kept while it idles
		}
	}
}

// keptQueue is the most room an idle flow keeps for its queue.
const keptQueue = 64

// idleFlowsSwept is how many flows the map holds before a new flow
// sweeps out the idle ones.
const idleFlowsSwept = 1024

// sweepIdle drops the idle flows ([flow.idle]) when the map has reached
// s.sweepAt, and sets the next sweep at twice the flows left (at least
// [idleFlowsSwept]), so that sweeping costs O(1) a new flow even when
// most flows are busy.
func (s *Scheduler[T]) sweepIdle() {
	if len(s.flows) < max(s.sweepAt, idleFlowsSwept) {
		return
	}
	for name, fl := range s.flows {
		if fl.idle() {
			delete(s.flows, name)
		}
	}
	s.sweepAt = 2 * len(s.flows)
}

// idle reports whether fl has nothing queued and nothing in the window.
func (fl *flow[T]) idle() bool { return fl.n == 0 && fl.inside == 0 }

// flowHeap is the busy flows, the one whose first queued entry has the
// smallest start tag (the earliest queued among equals) on top.
type flowHeap[T any] []*flow[T]

func (h flowHeap[T]) Len() int { return len(h) }
func (h flowHeap[T]) Less(i, j int) bool {
	a, b := h[i].queue[h[i].head], h[j].queue[h[j].head]
	if a.start != b.start {
		return a.start < b.start
	}
	return a.seq < b.seq
}
func (h flowHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *flowHeap[T]) Push(x any) {
	f := x.(*flow[T])
	f.hi = len(*h)
	*h = append(*h, f)
}
func (h *flowHeap[T]) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.hi = -1
	return f
}

// deadlineHeap is the queued entries with a deadline, the soonest on top.
type deadlineHeap[T any] []*Entry[T]

func (h deadlineHeap[T]) Len() int           { return len(h) }
func (h deadlineHeap[T]) Less(i, j int) bool { return h[i].Deadline.Before(h[j].Deadline) }
func (h deadlineHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dl, h[j].dl = i, j
}
func (h *deadlineHeap[T]) Push(x any) {
	e := x.(*Entry[T])
	e.dl = len(*h)
	*h = append(*h, e)
}
func (h *deadlineHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.dl = -1
	return e
}

// Defaults and bounds of pacing.
const (
	// DefaultCPUTarget is the share of its CPUs the process may use for
	// the work it admits while flows compete: all of them, so that
	// nothing is paced unless a target below 1 is asked for.
	DefaultCPUTarget = 1.0
	// pacePeriod is how often the pace is looked at.
	pacePeriod = 20 * time.Millisecond
	// activeSpan is how long a flow counts as active after an admission.
	activeSpan = 200 * time.Millisecond
	// paceBurst is the time of admissions the tokens may hold.
	paceBurst = 2 * time.Millisecond
	// minPace is the slowest pace, in admissions a second.
	minPace = 100.0
	// paceFloor is the share of the rate at which pacing began that the
	// pace never falls below.
	paceFloor = 0.25
)

// pacer is the scheduler's pacing state; it is guarded by the
// scheduler's lock.
type pacer struct {
	// cpu reports the process's CPU time used so far, on cores CPUs;
	// nil: no pacing.
	cpuTime func() time.Duration
	cores   int
	// rate is the admissions a second while paced; 0 when not paced.
	// floor is the slowest rate of this spell of pacing.
	rate, floor float64
	tokens      float64
	refill      time.Time
	// since, cpu and admitted are the start of the current period, the
	// process's CPU time then, and the admissions since.
	since    time.Time
	cpu      time.Duration
	admitted int
	// recent holds when each flow was last admitted, for a while.
	recent map[string]time.Time
}

// MeasureCPU lets s pace its window (see the package doc's "Pacing"): cpu reports the CPU
// time the process has used so far (such as user and system time from
// getrusage), on cores CPUs (GOMAXPROCS). It is called at most once a
// pace period, under the scheduler's lock. Without it nothing is paced.
func (s *Scheduler[T]) MeasureCPU(cpu func() time.Duration, cores int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pace.cpuTime, s.pace.cores = cpu, max(cores, 1)
}

// pacing reports whether s paces its window.
func (s *Scheduler[T]) pacing() bool { return s.pace.cpuTime != nil && s.cpuTarget() < 1 }

// cpuTarget is [Config.CPUTarget] with its default.
func (s *Scheduler[T]) cpuTarget() float64 {
	if s.cfg.CPUTarget == 0 {
		return DefaultCPUTarget
	}
	return s.cfg.CPUTarget
}

// steer looks at the pace once a period: the CPU the process used since
// the last look, the admissions, and the flows active.
func (s *Scheduler[T]) steer(now time.Time) {
	p := &s.pace
	if p.since.IsZero() {
		p.since, p.cpu = now, p.cpuTime()
		return
	}
	span := now.Sub(p.since)
	if span < pacePeriod {
		return
	}
	cpu := p.cpuTime()
	util := float64(cpu-p.cpu) / (float64(span) * float64(p.cores))
	admitted := float64(p.admitted) / span.Seconds()
	p.since, p.cpu, p.admitted = now, cpu, 0
	for name, at := range p.recent {
		if now.Sub(at) > activeSpan {
			delete(p.recent, name)
		}
	}
	active := len(p.recent)
	for _, fl := range s.busy {
		if _, in := p.recent[fl.name]; !in {
			active++ // queued, and not admitted lately: it waits too
		}
	}
	target := s.cpuTarget()
	switch {
	case active < 2:
		p.rate = 0
	case p.rate == 0:
		if util > target {
			p.floor = max(admitted*paceFloor, minPace)
			p.rate = max(admitted*target/util, p.floor)
			p.tokens, p.refill = 0, now
		}
	case util > target:
		p.rate = max(p.rate*0.9, p.floor)
	case util < 0.9*target:
		p.rate *= 1.1
		if p.rate > 2*admitted && admitted > 0 {
			p.rate = 0 // no longer binds
		}
	}
}

// take reports whether the pace lets one more entry in at now, and
// counts it when it does.
func (s *Scheduler[T]) take(now time.Time, name string) bool {
	p := &s.pace
	if p.rate > 0 {
		p.tokens = min(p.tokens+now.Sub(p.refill).Seconds()*p.rate, max(1, p.rate*paceBurst.Seconds()))
		p.refill = now
		if p.tokens < 1 {
			return false
		}
		p.tokens--
	}
	p.admitted++
	if p.recent == nil {
		p.recent = map[string]time.Time{}
	}
	p.recent[name] = now
	return true
}

// nextToken returns when the pace lets the next entry in, when entries
// wait for it.
func (s *Scheduler[T]) nextToken() (time.Time, bool) {
	p := &s.pace
	if p.rate == 0 || p.tokens >= 1 || len(s.busy) == 0 {
		return time.Time{}, false
	}
	return p.refill.Add(time.Duration((1 - p.tokens) / p.rate * float64(time.Second))), true
}
