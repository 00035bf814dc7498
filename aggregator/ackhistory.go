package aggregator

import "time"

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
