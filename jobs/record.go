package jobs

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
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
	// Answer is the caller's answer to the job's question, written by
	// rpc.jobs.answer for the runner that holds the job, which seals and
	// publishes it to the worker and then clears it.
	Answer *schema.Answer `json:"answer,omitempty"`
	// CannotAsk says that the submitter cannot answer a question (submit's
	// can_ask: false, as the MCP front door sends for a client that cannot
	// elicit): the job's call carries no Ask, so its tool fails to ask at
	// once, as in a synchronous call, where it would otherwise wait.
	CannotAsk bool `json:"cannot_ask,omitempty"`
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

// summary returns the record without params, result and history, as
// rpc.jobs.list returns it, so that a page stays small whatever the jobs
// carry.
func (s *stored) summary() *schema.JobRecord {
	r := s.JobRecord
	r.Params, r.Result, r.History = nil, nil, nil
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
// pending when the job has a notify_url. A failure, and a cancel, is a
// message of the job's history.
func (s *stored) finish(state schema.JobState, result json.RawMessage, rpcErr *schema.Error, now time.Time) {
	s.State, s.Result, s.Error, s.Waiting = state, result, rpcErr, ""
	s.Question, s.Answer = nil, nil
	s.FinishedAt = &now
	if s.NotifyURL != "" && s.Callback == nil {
		s.Callback = &schema.JobCallback{State: schema.JobCallbackPending}
	}
	if rpcErr != nil {
		s.say(rpcErr.Message, map[string]any{"error": rpcErr}, now)
	}
}

// progress records what a running job reported at now; a text it had
// not said last is a message of its history.
func (s *stored) progress(p *schema.JobProgress, now time.Time) {
	if p.Message != "" && (s.Progress == nil || s.Progress.Message != p.Message) {
		s.say(p.Message, map[string]any{"percent": p.Percent}, now)
	}
	s.Progress = p
}

// say adds a message of the job to its history, named by the job's id
// and the message's place in the history.
func (s *stored) say(text string, data any, at time.Time) {
	raw, err := json.Marshal(data)
	if err != nil {
		raw = nil
	}
	id := s.ID + "-" + strconv.Itoa(s.HistoryDropped+len(s.History)+1)
	s.addMessage(schema.JobMessage{ID: id, Role: schema.JobRoleAgent, Text: text, Data: raw, At: at})
}

// addMessage adds m to the history and drops the oldest messages while
// the history is over [MaxHistoryBytes].
func (s *stored) addMessage(m schema.JobMessage) {
	s.History = append(s.History, m)
	size := 0
	for _, m := range s.History {
		size += messageBytes(m)
	}
	s.dropHistory(size - MaxHistoryBytes)
}

// dropHistory drops the oldest messages of the history until at least n
// bytes of them are gone, or none is left, and returns how many bytes
// went.
func (s *stored) dropHistory(n int) int {
	gone, k := 0, 0
	for ; k < len(s.History) && gone < n; k++ {
		gone += messageBytes(s.History[k])
	}
	if k == 0 {
		return 0
	}
	s.HistoryDropped += k
	s.History = slices.Clone(s.History[k:])
	if len(s.History) == 0 {
		s.History = nil
	}
	return gone
}

// fit drops the oldest messages of the history until the record, as the
// bucket stores it, is at most limit bytes, so that a history never
// costs a job its result or its progress; it reports whether the record
// fits.
func (s *stored) fit(limit int64) bool {
	for {
		b, err := json.Marshal(s)
		if err != nil {
			return false
		}
		over := int64(len(b)) - limit
		if over <= 0 {
			return true
		}
		if s.dropHistory(int(over)) == 0 {
			return false
		}
	}
}

// messageBytes is what m costs of the history's budget: its JSON.
func messageBytes(m schema.JobMessage) int {
	b, err := json.Marshal(m)
	if err != nil {
		return 0
	}
	return len(b) + 1 // and the comma between two
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
