package aggregator

import (
	"slices"
	"time"
)

// This file holds what the table keeps besides its calls, each a type of
// its own that the table's lock guards and that its transitions consult:
//
//   - [endedTokens]: the reply tokens of the calls that ended last, so
//     that a late answer is told from a forged one;
//   - [ackHistory]: whether the workers of each method acknowledge
//     calls, which decides whether a call lets its worker hold the ack
//     back;
//   - [freeSlots]: the free-slot scheduler, the calls busy workers
//     refused and the slots replies named free.
//
// A call meets all three on its way (its method's history and pressure
// when it is published, its token when it ends), so they are read in
// one place.

// endedTokens remembers the reply tokens of the calls that ended last,
// in two generations of [EndedRemembered]: when the newer is full, the
// older is emptied and becomes the newer. Adding a token costs a map
// insertion, and the maps keep their room, so that once warm it
// allocates nothing. It is not safe for concurrent use.
type endedTokens struct {
	cur, old map[string]struct{}
}

// add remembers token.
func (e *endedTokens) add(token string) {
	if len(e.cur) >= EndedRemembered || e.cur == nil {
		if e.old == nil {
			e.old = make(map[string]struct{})
		}
		clear(e.old)
		e.cur, e.old = e.old, e.cur
	}
	e.cur[token] = struct{}{}
}

// has reports whether token is remembered.
func (e *endedTokens) has(token string) bool {
	if _, ok := e.cur[token]; ok {
		return true
	}
	_, ok := e.old[token]
	return ok
}

// ackHistory is what the table has seen of whether the workers of each
// method acknowledge calls (rule 8 of schema/PROTOCOL.md). A call lets
// its worker hold back the ack (Toolbus-Ack-Delay) only when its method's
// workers are known to acknowledge: a worker that holds to rule 8 has
// then acknowledged or answered it by the end of the delay, so a call
// silent for longer had its worker lost, and is answered so. A call of
// any other method asks for the ack at once, as without a delay: a
// worker lost holding it is noticed by its silence after the ack, and a
// worker that does not speak rule 8, which never acknowledges anything,
// is waited for until the deadline.
//
// A method is known to acknowledge once a call of it was acknowledged.
// A reply that comes with no ack long after one was due (later than the
// ack timeout after it), or to a call already answered lost for want of
// one, shows a worker of the method that does not acknowledge; from then
// on, for [distrustFor] after the latest such reply, the method's calls
// ask for the ack at once again, whatever its other workers do.
//
// Forgetting is always safe: the calls of a method the history does not
// know ask for the ack at once. So the history is emptied whenever it
// would track more than [maxMethodsTracked] methods or remember more
// than [maxLostRemembered] calls. It is not safe for concurrent use: the
// table's lock guards it.
type ackHistory struct {
	methods map[string]ackSeen
	// lost holds the reply tokens of the calls answered lost for want of
	// an ack, with their methods, so that a reply to one that comes
	// after all is known for what it shows.
	lost map[string]string
}

// ackSeen is what a method's workers did: acknowledged a call, and when
// one last answered a call late without its ack.
type ackSeen struct {
	acked   bool
	unacked time.Time
}

const (
	// distrustFor is how long the calls of a method ask for the ack at
	// once after one of its workers answered a call late without
	// acknowledging it: a worker that does not speak rule 8 keeps
	// answering so while it runs, and the history forgets it only once
	// none has done so for that long.
	distrustFor = time.Hour
	// maxLostRemembered bounds the calls answered lost for want of an
	// ack whose late reply would still be noticed.
	maxLostRemembered = 1024
)

func newAckHistory() ackHistory {
	return ackHistory{methods: map[string]ackSeen{}, lost: map[string]string{}}
}

// record stores s as what method's workers did.
func (h *ackHistory) record(method string, s ackSeen) {
	if _, ok := h.methods[method]; !ok && len(h.methods) >= maxMethodsTracked {
		clear(h.methods)
	}
	h.methods[method] = s
}

// acked records that a worker of method acknowledged a call.
func (h *ackHistory) acked(method string) {
	if s := h.methods[method]; !s.acked {
		s.acked = true
		h.record(method, s)
	}
}

// unacked records that a worker of method answered a call at now, late
// and without an ack.
func (h *ackHistory) unacked(method string, now time.Time) {
	s := h.methods[method]
	s.unacked = now
	h.record(method, s)
}

// acknowledges reports whether the workers of method are known, at now,
// to acknowledge every call they hold by the end of the delay.
func (h *ackHistory) acknowledges(method string, now time.Time) bool {
	s := h.methods[method]
	return s.acked && (s.unacked.IsZero() || now.Sub(s.unacked) >= distrustFor)
}

// lostUnacked remembers that the call of method with reply token was
// answered lost for want of an ack.
func (h *ackHistory) lostUnacked(token, method string) {
	if len(h.lost) >= maxLostRemembered {
		clear(h.lost)
	}
	h.lost[token] = method
}

// lateReply takes note of a reply that came at now to token after its
// call was answered: when the call was answered lost for want of an ack,
// its worker was alive and does not acknowledge.
func (h *ackHistory) lateReply(token string, now time.Time) {
	method, ok := h.lost[token]
	if !ok {
		return
	}
	delete(h.lost, token)
	h.unacked(method, now)
}

// freeSlots schedules the calls of a method onto the slots its workers
// name free (rule 10 of schema/PROTOCOL.md). It keeps, by method, the
// calls that busy workers refused, in line by when they were first
// refused; the slots replies named that no call in line took, for
// [freeSlotTTL]; and whether the method is under pressure (a call was
// refused, or sent to a named slot, within [pressedFor]), which is when
// its calls ask their workers to name the slots they free. Direct
// subjects that reached nobody are not believed for [unreachableFor].
//
// It is not safe for concurrent use: the table's lock guards it. Every
// method takes the time, so that it runs on the table's clock.
type freeSlots struct {
	line          map[string][]*call
	pressedAt     map[string]time.Time
	free          map[string][]freeSlot
	unreachableAt map[string]time.Time
}

// freeSlot is a slot a worker named free at a time.
type freeSlot struct {
	direct string
	at     time.Time
}

const (
	// freeSlotTTL is how long a free slot a reply named is believed:
	// after it, another call has likely taken it.
	freeSlotTTL = 100 * time.Millisecond
	// pressedFor is how long calls ask for free slots after the last
	// refusal or the last call sent to a slot named free.
	pressedFor = time.Second
	// unreachableFor is how long the free slots of a worker whose direct
	// subject reached nobody are ignored.
	unreachableFor = time.Minute
	// maxMethodsTracked is how many methods the scheduler keeps pressure
	// and free slots for before it sweeps out those gone stale: a worker
	// that serves a pattern may be called by many names, and the maps
	// must not grow with them.
	maxMethodsTracked = 1024
	// maxFreeOffered bounds the free slots kept for one method, however
	// many replies name them.
	maxFreeOffered = 64
)

func newFreeSlots() freeSlots {
	return freeSlots{line: map[string][]*call{}, pressedAt: map[string]time.Time{},
		free: map[string][]freeSlot{}, unreachableAt: map[string]time.Time{}}
}

// pressed reports whether calls of method were refused by busy workers,
// or sent to slots replies named free, within the last [pressedFor]: the
// calls of method then ask their workers to name the slots their replies
// free ([schema.HeaderNameFree]).
func (s *freeSlots) pressed(method string, now time.Time) bool {
	at, ok := s.pressedAt[method]
	if ok && now.Sub(at) > pressedFor {
		delete(s.pressedAt, method)
		return false
	}
	return ok
}

// refuse puts cl, refused by a busy worker, in its method's line by
// when it was first refused: a call refused again after a slot named
// free was taken under it keeps its place.
func (s *freeSlots) refuse(cl *call, now time.Time) {
	s.pressedAt[cl.method] = now
	s.sweep(now)
	q := s.line[cl.method]
	i := len(q)
	for i > 0 && q[i-1].busy.first > cl.busy.first {
		i--
	}
	s.line[cl.method] = slices.Insert(q, i, cl)
}

// leaveLine takes cl out of its method's line, when it is there.
func (s *freeSlots) leaveLine(cl *call) {
	q := s.line[cl.method]
	if i := slices.Index(q, cl); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) == 0 {
		delete(s.line, cl.method)
	} else {
		s.line[cl.method] = q
	}
}

// freed gives the slot of direct, named free for method, to the first
// call in line, which it takes out of the line and returns; with nobody
// in line it keeps the slot for the next call of method ([take]) and
// returns nil. A slot of a direct subject not believed is ignored.
func (s *freeSlots) freed(method, direct string, now time.Time) *call {
	if at, ok := s.unreachableAt[direct]; ok {
		if now.Sub(at) < unreachableFor {
			return nil
		}
		delete(s.unreachableAt, direct)
	}
	if q := s.line[method]; len(q) > 0 {
		cl := q[0]
		if q = q[1:]; len(q) == 0 {
			delete(s.line, method)
		} else {
			s.line[method] = q
		}
		return cl
	}
	f := append(s.free[method], freeSlot{direct: direct, at: now})
	if len(f) > maxFreeOffered {
		f = f[len(f)-maxFreeOffered:]
	}
	s.free[method] = f
	s.sweep(now)
	return nil
}

// take returns the direct subject of a worker a reply lately named with
// a free slot for method, and forgets that slot; false when none is
// known.
func (s *freeSlots) take(method string, now time.Time) (string, bool) {
	f := s.free[method]
	for len(f) > 0 && now.Sub(f[0].at) > freeSlotTTL {
		f = f[1:]
	}
	if len(f) == 0 {
		delete(s.free, method)
		return "", false
	}
	to := f[0].direct
	s.pressedAt[method] = now
	if f = f[1:]; len(f) == 0 {
		delete(s.free, method)
	} else {
		s.free[method] = f
	}
	return to, true
}

// markUnreachable records that a call sent to direct reached nobody: its worker
// is gone, or cannot subscribe there (NATS permissions older than rule
// 10). The slots it names are ignored for [unreachableFor], and those already
// named are forgotten.
func (s *freeSlots) markUnreachable(direct string, now time.Time) {
	s.unreachableAt[direct] = now
	for m, f := range s.free {
		f = slices.DeleteFunc(f, func(slot freeSlot) bool { return slot.direct == direct })
		if len(f) == 0 {
			delete(s.free, m)
		} else {
			s.free[m] = f
		}
	}
	if len(s.unreachableAt) > maxMethodsTracked {
		for d, at := range s.unreachableAt {
			if now.Sub(at) >= unreachableFor {
				delete(s.unreachableAt, d)
			}
		}
	}
}

// sweep forgets the pressure and the free slots gone stale, once either
// map holds more than maxMethodsTracked methods.
func (s *freeSlots) sweep(now time.Time) {
	if len(s.pressedAt) <= maxMethodsTracked && len(s.free) <= maxMethodsTracked {
		return
	}
	for m, at := range s.pressedAt {
		if now.Sub(at) > pressedFor {
			delete(s.pressedAt, m)
		}
	}
	for m, f := range s.free {
		if len(f) == 0 || now.Sub(f[len(f)-1].at) > freeSlotTTL {
			delete(s.free, m)
		}
	}
}
