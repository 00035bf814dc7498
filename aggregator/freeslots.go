package aggregator

import (
	"slices"
	"time"
)

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
