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

// stored is a record as the KV bucket holds it: the public record and the
// bookkeeping only toolbus reads.
type stored struct {
	schema.JobRecord
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
func (s *stored) public() *schema.JobRecord {
	r := s.JobRecord
	r.Callback = shownCallback(r.Callback)
	r.Waiting = s.waiting()
	return &r
}

// waiting is the record's Waiting as a caller sees it: what a job waited
// for at submit no longer holds once it has left the queue.
func (s *stored) waiting() string {
	if s.State != schema.JobQueued {
		return ""
	}
	return s.Waiting
}

// summary returns the record without params and result, as rpc.jobs.list
// returns it, so that a page stays small whatever the jobs carry.
func (s *stored) summary() *schema.JobRecord {
	r := s.JobRecord
	r.Params, r.Result = nil, nil
	r.Callback = shownCallback(r.Callback)
	r.Waiting = s.waiting()
	return &r
}

// shown returns c as a caller sees it: a failure whose text is not a class
// (one an older ingress recorded during a rolling upgrade, say) reads
// "failed", so that no text of a receiver's ever reaches a caller.
func shownCallback(c *schema.JobCallback) *schema.JobCallback {
	if c == nil {
		return nil
	}
	cp := *c
	cp.Failures = make([]schema.JobCallbackFailure, len(c.Failures))
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
func (s *stored) finish(state schema.JobState, result json.RawMessage, rpcErr *schema.Error, now time.Time) {
	s.State, s.Result, s.Error, s.Waiting = state, result, rpcErr, ""
	s.FinishedAt = &now
	if s.NotifyURL != "" && s.Callback == nil {
		s.Callback = &schema.JobCallback{State: schema.JobCallbackPending}
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
