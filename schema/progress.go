package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Headers and values of the liveness protocol (PROTOCOL.md, section 4,
// rule 8). An aggregator that sets [HeaderHeartbeat] on a call message
// asks the worker for progress messages on the call's reply subject:
// messages whose [HeaderProgress] says what they are, empty but for a
// [ProgressReport]. A reply never
// carries HeaderProgress, so an aggregator tells the two apart by it; a
// worker that does not know the protocol sends none, and an aggregator that
// does not ask gets none. A progress message may carry a reply subject of
// the worker's, on which NATS tells the worker that nobody listens for the
// call's answer any more (rule 9); an aggregator never answers it.
const (
	// HeaderHeartbeat, on a call message, is the interval in milliseconds
	// (decimal digits) at which the aggregator wants heartbeats.
	HeaderHeartbeat = "Toolbus-Heartbeat"
	// HeaderHeartbeatMisses, on a call message with HeaderHeartbeat, is
	// how many intervals without a progress message the aggregator waits
	// before it takes the call's worker for lost (decimal digits; 3 when
	// absent). A worker waits as many heartbeats in a row that nobody
	// heard before it cancels the call as orphaned.
	HeaderHeartbeatMisses = "Toolbus-Heartbeat-Misses"
	// HeaderAckDelay, on a call message with HeaderHeartbeat, is how long
	// in milliseconds (decimal digits) the worker may hold back its ack:
	// a call answered within it needs no ack at all, which spares every
	// short call one message (revision 7). A worker that does not know it
	// acknowledges at once, which is also right.
	HeaderAckDelay = "Toolbus-Ack-Delay"
	// HeaderDirect, on a reply or a busy refusal, names the subject prefix
	// on which the worker that sent it takes calls of its own, outside
	// the queue group ("<prefix>.direct.<id>"), and HeaderFree how many
	// calls of the message's method it has room for now (decimal
	// digits). A worker sends them on a reply when the call asked with
	// HeaderNameFree, and HeaderDirect alone on a busy refusal, so that an
	// aggregator holding calls that busy workers refused sends one to
	// the slot that just freed instead of to a random member of the
	// queue group (revision 7, rule 10).
	HeaderDirect = "Toolbus-Direct"
	HeaderFree   = "Toolbus-Free"
	// HeaderNameFree, on a call message, asks the worker to name on its
	// reply, with HeaderDirect and HeaderFree, the slot the reply frees.
	// An aggregator asks while busy workers refuse calls of the method,
	// or while it sends calls to the slots named, and not otherwise: the
	// headers are worth their cost only under load.
	HeaderNameFree = "Toolbus-Name-Free"
	// HeaderProgress, on a message on a call's reply subject, marks it as
	// a progress message, not the reply; its value is one of the Progress
	// constants.
	HeaderProgress = "Toolbus-Progress"
)

// Values of [HeaderProgress].
const (
	// ProgressAck: a worker has taken the call; heartbeats follow.
	ProgressAck = "ack"
	// ProgressBeat: the worker holding the call is alive.
	ProgressBeat = "beat"
	// ProgressBusy: the worker is at its concurrency limit for the method
	// and did not take the call; the aggregator may publish it again for
	// another worker. Nothing of the call ran.
	ProgressBusy = "busy"
	// ProgressReport: the handler reports how far it has got; the body is
	// the JSON of a [JobProgress] ([MarshalProgress]). A report is also a
	// sign of life, as a beat is.
	ProgressReport = "report"
)

// MaxProgressMessageBytes is the longest message of a progress report; a
// longer one is cut at a UTF-8 boundary by the worker and refused by the
// aggregator.
const MaxProgressMessageBytes = 1024

// MarshalProgress returns the body of a [ProgressReport] message:
// {"percent":P,"message":"M"}, the message left out when empty. percent
// is clamped to [0, 100] (NaN counts as 0) and message cut to
// [MaxProgressMessageBytes].
func MarshalProgress(percent float64, message string) []byte {
	switch {
	case math.IsNaN(percent) || percent < 0:
		percent = 0
	case percent > 100:
		percent = 100
	}
	b, _ := json.Marshal(JobProgress{Percent: percent, Message: TruncateUTF8(message, MaxProgressMessageBytes)})
	return b
}

// UnmarshalProgress reads the body of a [ProgressReport] message. It
// refuses a body that is not a JSON object with a number percent between
// 0 and 100, or whose message is not a string or is longer than
// [MaxProgressMessageBytes]; members it does not know are ignored.
func UnmarshalProgress(b []byte) (JobProgress, error) {
	var body struct {
		Percent *float64 `json:"percent"`
		Message *string  `json:"message"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return JobProgress{}, fmt.Errorf("schema: progress report: %w", err)
	}
	if body.Percent == nil || *body.Percent < 0 || *body.Percent > 100 {
		return JobProgress{}, errors.New("schema: progress report: percent must be a number from 0 to 100")
	}
	p := JobProgress{Percent: *body.Percent}
	if body.Message != nil {
		if len(*body.Message) > MaxProgressMessageBytes {
			return JobProgress{}, fmt.Errorf("schema: progress report: message longer than %d bytes", MaxProgressMessageBytes)
		}
		p.Message = *body.Message
	}
	return p, nil
}

// TruncateUTF8 returns s cut to at most n bytes, never inside a rune.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Step back over continuation bytes so the cut never splits a rune.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
