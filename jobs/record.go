package jobs

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// State is where a job is in its life. A job starts [StateQueued], becomes
// [StateRunning] when a worker takes it, and ends in one of the final
// states [StateSucceeded], [StateFailed] or [StateCanceled], which never
// change again. A running job whose worker was interrupted goes back to
// running on another worker (when its tool is safe to retry) or fails.
type State string

// The states of a job.
const (
	StateQueued    State = "queued"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCanceled  State = "canceled"
)

// Final reports whether s is a state a job never leaves.
func (s State) Final() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCanceled
}

func (s State) valid() bool {
	return s == StateQueued || s == StateRunning || s.Final()
}

// Progress is what a running job last reported through worker.Progress.
type Progress struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message,omitempty"`
}

// CallbackState is how far the completion callback of a job has got.
type CallbackState string

// The states of a completion callback.
const (
	// CallbackPending: the job has a notify_url and the callback has not
	// been delivered yet (it may be between attempts).
	CallbackPending CallbackState = "pending"
	// CallbackDelivered: the notify_url answered 2xx.
	CallbackDelivered CallbackState = "delivered"
	// CallbackFailed: every attempt failed; the result is still in the
	// record.
	CallbackFailed CallbackState = "failed"
)

// Callback records the delivery of a job's completion callback.
type Callback struct {
	State    CallbackState `json:"state"`
	Attempts int           `json:"attempts"`
	// Failures holds one entry per failed attempt, oldest first.
	Failures    []CallbackFailure `json:"failures,omitempty"`
	DeliveredAt *time.Time        `json:"delivered_at,omitempty"`
}

// CallbackFailure is one failed delivery attempt of a callback.
type CallbackFailure struct {
	At time.Time `json:"at"`
	// Error is the class of the failure, never text of the receiver's:
	// "blocked" (the address is one callbacks may not reach), "dns",
	// "refused", "unreachable", "timeout", "tls", "closed" (closed
	// without an answer), "protocol" (the answer was not HTTP),
	// "canceled", "failed" (anything else), or "status N" for an answer
	// outside 2xx.
	Error string `json:"error"`
}

// Record is a job as rpc.jobs.get returns it and as the callback posts it.
// Exactly one of Result and Error is set once the job has succeeded or
// failed; a canceled job carries a -32004 Error.
type Record struct {
	ID             string          `json:"id"`
	Method         string          `json:"method"`
	Params         json.RawMessage `json:"params,omitempty"`
	State          State           `json:"state"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *schema.Error   `json:"error,omitempty"`
	Progress       *Progress       `json:"progress,omitempty"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	Caller         string          `json:"caller,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	NotifyURL      string          `json:"notify_url,omitempty"`
	Callback       *Callback       `json:"callback,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// TTLSeconds is how long the record is kept once the job has finished.
	TTLSeconds int64 `json:"ttl_seconds"`
}

// stored is a record as the KV bucket holds it: the public record and the
// bookkeeping only toolbus reads.
type stored struct {
	Record
	// RunSeq is the stream sequence of the queue message whose delivery
	// set the job running. A redelivery of that message finds it equal and
	// knows its earlier run was interrupted; any other message for the same
	// job is a duplicate.
	RunSeq uint64 `json:"run_seq,omitempty"`
	// IdemKey is the bucket key of the idempotency entry that points at
	// this job, so that it can be given the record's TTL when the job ends.
	IdemKey string `json:"idem_key,omitempty"`
	// TraceParent is the W3C traceparent of the call that submitted the
	// job, so that the run joins the submitter's trace.
	TraceParent string `json:"traceparent,omitempty"`
}

func (s *stored) ttl() time.Duration { return time.Duration(s.TTLSeconds) * time.Second }

// public returns the record without bookkeeping, as a caller sees it.
func (s *stored) public() *Record {
	r := s.Record
	r.Callback = r.Callback.shown()
	return &r
}

// summary returns the record without params and result, as rpc.jobs.list
// returns it, so that a page stays small whatever the jobs carry.
func (s *stored) summary() *Record {
	r := s.Record
	r.Params, r.Result = nil, nil
	r.Callback = r.Callback.shown()
	return &r
}

// shown returns c as a caller sees it: a failure whose text is not a class
// (one an older ingress recorded during a rolling upgrade, say) reads
// "failed", so that no text of a receiver's ever reaches a caller.
func (c *Callback) shown() *Callback {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Failures = make([]CallbackFailure, len(c.Failures))
	for i, f := range c.Failures {
		if !egress.Class(f.Error).Valid() {
			f.Error = string(egress.ClassFailed)
		}
		cp.Failures[i] = f
	}
	if len(cp.Failures) == 0 {
		cp.Failures = nil
	}
	return &cp
}

// finish moves the record to a final state at now. A callback becomes
// pending when the job has a notify_url.
func (s *stored) finish(state State, result json.RawMessage, rpcErr *schema.Error, now time.Time) {
	s.State, s.Result, s.Error = state, result, rpcErr
	s.FinishedAt = &now
	if s.NotifyURL != "" && s.Callback == nil {
		s.Callback = &Callback{State: CallbackPending}
	}
}

// idEncoding is Crockford's base32 alphabet in lower case: its characters
// are in ascending byte order, so ids sort as their bytes do.
var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

const idLen = 26 // 16 bytes in base32

// idSource makes job ids: 48 bits of milliseconds since the epoch, then 80
// random bits. Ids sort by creation time and cannot be guessed, so knowing an
// id is part of what lets a caller see its job. Within one millisecond the
// ids of one source still sort in the order they were made: the random part
// of the next id is the previous one plus a random step of up to 2^32. Its
// zero value is ready; it is safe for concurrent use.
type idSource struct {
	mu   sync.Mutex
	last [16]byte
}

func (g *idSource) next(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	g.mu.Lock()
	defer g.mu.Unlock()
	if [6]byte(b[:6]) == [6]byte(g.last[:6]) {
		b = g.last
		var step [4]byte
		rand.Read(step[:])
		carry := uint64(binary.BigEndian.Uint32(step[:])) + 1
		for i := 15; i >= 6 && carry > 0; i-- {
			sum := uint64(b[i]) + carry&0xff
			b[i] = byte(sum)
			carry = carry>>8 + sum>>8
		}
		if carry > 0 {
			// The random part ran over within one millisecond: start
			// afresh; order within this millisecond is lost, nothing else.
			rand.Read(b[6:])
		}
	} else {
		rand.Read(b[6:])
	}
	g.last = b
	return idEncoding.EncodeToString(b[:])
}

func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	_, err := idEncoding.DecodeString(id)
	return err == nil
}
