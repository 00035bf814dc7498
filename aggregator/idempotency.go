package aggregator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/latest"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of the idempotency records.
const (
	// DefaultIdempotencyTTL is how long a finished call's answer is
	// replayed for a duplicate, unless [IdempotencyBucket] is given
	// another TTL.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultIdempotencyMaxBytes is the byte cap of the bucket of
	// records (idempotency_max_bytes), unless [IdempotencyBucket] is
	// given another.
	DefaultIdempotencyMaxBytes int64 = 1 << 30
)

// storeTimeout bounds the writes of a finished call's record.
const storeTimeout = 5 * time.Second

// How a duplicate waits for the call that holds its record. It reads the
// record again whenever the aggregator's one watch of the bucket says it
// changed; while no watch is up, or a read failed, it reads again after a
// pause that doubles from idemPollMin to idemPollMax, with jitter; never
// after its deadline. A record still running staleGrace after its call's
// deadline will not be finished: the aggregator that ran the call stores
// its outcome within storeTimeout, or could not (it stopped, or the
// bucket was full), and the call may have run.
const (
	idemPollMin = 50 * time.Millisecond
	idemPollMax = 2 * time.Second
	staleGrace  = 2 * storeTimeout
)

// How the watch of the records runs: it stays up idemWatchLinger after
// its last waiter left, so that duplicates that come one after the other
// do not create a consumer each; creating it may take
// idemWatchCreateTimeout; one that fails is made again after
// idemWatchRetryMin, doubling up to idemWatchRetryMax.
const (
	idemWatchLinger        = 30 * time.Second
	idemWatchCreateTimeout = 10 * time.Second
	idemWatchRetryMin      = 100 * time.Millisecond
	idemWatchRetryMax      = 10 * time.Second
)

// recordSlack is how much larger than the "answer not kept" record a
// running record is written: the revision a replacing write expects is
// kept in a header of the stored message, with more digits than the zero
// a new record expects.
const recordSlack = 64

// IdempotencyBucket creates, or opens, the JetStream key-value bucket of
// idempotency records of the cluster of subjects: every
// ingress replica of the cluster must use the same one. A record expires
// ttl after its last write (zero means [DefaultIdempotencyTTL]); choose a
// ttl longer than the longest call. replicas is the bucket's JetStream
// replica count (zero means 1; 3 on a three-node cluster). maxBytes caps
// the bucket (zero means [DefaultIdempotencyMaxBytes]): once it is full a
// call with a new idempotency key is refused -32003 rather than run
// without its record, and the rest of the JetStream store stays for jobs.
func IdempotencyBucket(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, ttl time.Duration, replicas int, maxBytes int64) (jetstream.KeyValue, error) {
	if subjects.IsZero() {
		return nil, errors.New("aggregator: idempotency bucket of zero subjects")
	}
	if ttl < 0 || replicas < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("aggregator: idempotency ttl, replicas and max bytes must not be negative, got %v, %d and %d", ttl, replicas, maxBytes)
	}
	if ttl == 0 {
		ttl = DefaultIdempotencyTTL
	}
	if maxBytes == 0 {
		maxBytes = DefaultIdempotencyMaxBytes
	}
	kv, err := bus.KeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      subjects.Token() + "_idem",
		Description: "toolbus idempotency records of sync calls",
		TTL:         ttl,
		History:     1,
		Replicas:    max(replicas, 1),
		MaxBytes:    maxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("aggregator: idempotency records: %w", err)
	}
	return kv, nil
}

// WithIdempotencyStore keeps idempotency records in the bucket s has open
// (see [IdempotencyBucket] and [IdempotencyStore.Open]) for calls that carry a [schema.Call.IdempotencyKey] (default: keys are
// ignored). A key's call runs at most once while its record lives. A
// duplicate of a call in flight, on this or any other aggregator sharing
// the bucket, waits for the first and gets its answer; the duplicates of one
// aggregator share one watch of the bucket (one JetStream consumer,
// however many wait), and read records with direct gets. A duplicate of a
// finished call gets the stored answer, or, when the answer did not fit
// the bucket, -32006 saying that the call ran and its answer was not
// kept; when the aggregator that ran it stopped before it stored the
// outcome, the duplicate is answered the same way once the call's
// deadline and a grace have passed: the call may have run, so it is not
// run again until its record expires. A
// retryable failure (a timeout, unavailability, overload, cancellation)
// is not stored, so that sending the call again runs it again. A key sent
// again with a different method or params is answered -32600. When the
// store cannot record the call (unreachable, or full), the call is
// refused -32003, retryable, and does not run: a safety feature that
// cannot work never runs the call unprotected, unless
// [WithIdempotencyFailOpen] says so. Each caller may hold a bounded number
// of records ([WithIdempotencyCallerLimits]).
//
// Until s is open, a call carrying an idempotency key is refused with
// -32003 (retryable, naming what the store waits for), as it is when
// JetStream is not up yet; it never runs without its record. The store is
// its owner's, who closes it ([IdempotencyStore.Close]) when done with the
// aggregator: the watch of the records stops then, not only when the
// connection closes.
func WithIdempotencyStore(s *IdempotencyStore) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("aggregator: nil idempotency store")
		}
		c.idem = s
		return nil
	}
}

// IdempotencyStore holds the bucket of idempotency records once it is
// open (see [WithIdempotencyStore]). Its zero value is a store not open
// yet. It is safe for concurrent use.
type IdempotencyStore struct {
	// clock is the time of the waits on records; nil is the wall
	// clock's (tests set their own).
	clock idemClock

	mu      sync.Mutex
	kv      jetstream.KeyValue
	hub     *idemHub // the waits on kv's records
	waiting string
	closed  bool
}

// Close stops the store's watch of the records, at once rather than when
// it has idled or its connection closed: a duplicate still waiting reads
// its record at intervals until its deadline, and no watch starts again.
// Call it when the aggregator is done with the store.
func (s *IdempotencyStore) Close() {
	s.mu.Lock()
	h := s.hub
	s.closed = true
	s.mu.Unlock()
	if h != nil {
		h.close()
	}
}

// Open makes the store use kv from now on; the watch of the bucket it had
// open before, if any, stops.
func (s *IdempotencyStore) Open(kv jetstream.KeyValue) {
	s.mu.Lock()
	var old *idemHub
	if s.kv != kv {
		old, s.hub = s.hub, nil
	}
	s.kv = kv
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// waits returns the hub of the waits on kv's records: one for the bucket
// the store has open, made when first needed.
func (s *IdempotencyStore) waits(kv jetstream.KeyValue) *idemHub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hub != nil && s.hub.kv == kv {
		return s.hub
	}
	h := newIdemHub(kv, s.clock)
	// A hub for a bucket the store no longer has open (read just before
	// Open replaced it) is nobody's to close: it starts no watch, and its
	// waiters read their records at intervals.
	h.closed = s.closed || kv != s.kv
	if kv == s.kv {
		s.hub = h
	}
	return h
}

// Waiting records why the store is not open yet, for the refusals of the
// calls that need it; the reason reads after "waiting for", e.g.
// "JetStream: no suitable peers for placement".
func (s *IdempotencyStore) Waiting(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = reason
}

// bucket returns the bucket, or nil and what the store waits for.
func (s *IdempotencyStore) bucket() (jetstream.KeyValue, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv, s.waiting
}

// storeNotOpen is the refusal of a call with an idempotency key while the
// store is not open.
func storeNotOpen(waiting string) *schema.Error {
	msg := "the idempotency store is not open yet; send the call again shortly"
	if waiting != "" {
		msg = "the idempotency store is not open yet (waiting for " + waiting + "); send the call again shortly"
	}
	return schema.NewError(schema.CodeUnavailable, msg, map[string]any{
		"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonIdempotencyStoreNotOpen})
}

// idemRecord is the stored state of one idempotent call.
type idemRecord struct {
	State string `json:"state"` // "running" or "done"
	// Fingerprint is a digest of the method and params, to refuse a key
	// reused for another call.
	Fingerprint string `json:"fp"`
	// Until is when a running call's deadline passes (Unix ns): a record
	// still running well after it will not be finished.
	Until  int64           `json:"until,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *schema.Error   `json:"error,omitempty"`
	// Pad makes a running record as large as the one that replaces it
	// (see [runningRecord]).
	Pad string `json:"pad,omitempty"`
}

const (
	idemRunning = "running"
	idemDone    = "done"
)

// idemKey returns the record key of a call, or "" when it has none. The
// caller is part of it: one caller's key never names another's call.
func idemKey(c *schema.Call) string {
	if c.IdempotencyKey == "" || c.IsNotification() {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(c.Caller))
	h.Write([]byte{0})
	h.Write([]byte(c.IdempotencyKey))
	return "call." + hex.EncodeToString(h.Sum(nil))
}

func fingerprint(c *schema.Call) string {
	h := sha256.New()
	h.Write([]byte(c.Method))
	h.Write([]byte{0})
	h.Write(c.Params)
	return hex.EncodeToString(h.Sum(nil))
}

// idempotent answers c through its idempotency record k: it runs the call
// when it claims the record, and otherwise waits for, or replays, the
// answer of the call that did.
func (a *Aggregator) idempotent(ctx context.Context, c *schema.Call, kv jetstream.KeyValue, k string, timeout time.Duration,
	run func() ([]byte, *schema.Error)) ([]byte, *schema.Error) {
	h := a.idem.waits(kv)
	fp := fingerprint(c)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = h.clock.now().Add(a.maxTimeout)
	}
	running := runningRecord(fp, deadline)
	// A record that goes away at once again and again (other calls of
	// the key keep failing in a retryable way, or a replica that lags
	// keeps missing it) is created again after a pause.
	again := backoff{min: idemPollMin, max: idemPollMax}
	for attempt := 0; ; attempt++ {
		if attempt > 1 {
			if e := a.idemPause(ctx, c, h, deadline, again.pause(), timeout); e != nil {
				return nil, e
			}
		}
		if e := a.idemQuota.admit(ctx, c.Caller, k, bucketTTL(kv)); e != nil {
			return nil, e
		}
		rev, err := kv.Create(ctx, k, running)
		if err == nil {
			a.idemQuota.add(c.Caller, k, len(k)+len(running))
			return a.runAndStore(ctx, h, k, c.Caller, rev, fp, run)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if ctx.Err() != nil {
				return nil, ctxError(ctx, c.Method, timeout)
			}
			if a.idemFailOpen {
				a.log.Warn("idempotency store cannot record the call, running it without a record (fail-open)", "method", c.Method, "err", err)
				return run()
			}
			a.log.Warn("idempotency store cannot record the call, refused", "method", c.Method, "err", err)
			return nil, storeRefused(err)
		}
		result, rpcErr, gone := a.await(ctx, c, h, k, fp, deadline, timeout)
		if !gone {
			return result, rpcErr
		}
		// The record went away (its call failed in a retryable way, or
		// expired): try to create it again.
	}
}

// idemPause waits d, or until the call's deadline if that comes first; it
// returns the call's error when the wait ended with the call.
func (a *Aggregator) idemPause(ctx context.Context, c *schema.Call, h *idemHub, deadline time.Time, d time.Duration, timeout time.Duration) *schema.Error {
	now := h.clock.now()
	if !now.Before(deadline) {
		return a.lateError(ctx, c, timeout)
	}
	wake, stop := h.clock.after(min(d, deadline.Sub(now)))
	defer stop()
	select {
	case <-wake:
	case <-ctx.Done():
		return ctxError(ctx, c.Method, timeout)
	}
	if !h.clock.now().Before(deadline) {
		return a.lateError(ctx, c, timeout)
	}
	return nil
}

// lateError is the answer of a call whose deadline passed while it waited
// on another's record.
func (a *Aggregator) lateError(ctx context.Context, c *schema.Call, timeout time.Duration) *schema.Error {
	if ctx.Err() != nil {
		return ctxError(ctx, c.Method, timeout)
	}
	return timedOut(c.Method, timeout, "")
}

// await waits until record k, held by another call, is done (its answer
// is returned), gone (deleted or expired), or still running [staleGrace]
// after that call's deadline (the call may have run: [outcomeUnknown]);
// an error ends the wait at this call's deadline. It reads the
// record with direct gets, each time the aggregator's one watch of the
// bucket says the key changed; while no watch is up it reads again after
// pauses that double from [idemPollMin] to [idemPollMax], with jitter.
func (a *Aggregator) await(ctx context.Context, c *schema.Call, h *idemHub, k, fp string, deadline time.Time,
	timeout time.Duration) (result []byte, rpcErr *schema.Error, gone bool) {
	w := h.wait(k, a.log)
	defer w.stop()
	poll := backoff{min: idemPollMin, max: idemPollMax}
	// heard is the newest revision of k the watch told of: a read of an
	// older one came from a replica that lags, and is read again.
	var heard uint64
	missed := false
	for {
		mustPoll := !h.watching()
		var staleAt time.Time
		e, err := h.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) && (heard == 0 || missed):
			return nil, nil, true
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// The watch told of a newer value: a replica that lags,
			// unless the record is still missing on the next read.
			missed, mustPoll = true, true
		case err != nil && ctx.Err() != nil:
			return nil, ctxError(ctx, c.Method, timeout), false
		case err != nil:
			mustPoll = true
		case e.Revision() < heard:
			mustPoll = true
		default:
			var rec idemRecord
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				return nil, schema.Errorf(schema.CodeInternal, "internal error: bad idempotency record: %v", err), false
			}
			if rec.Fingerprint != fp {
				return nil, schema.NewError(schema.CodeInvalidRequest,
					"invalid request: the idempotency key was used for another call",
					map[string]any{"reason": schema.ReasonIdempotencyKeyReused, "method": c.Method}), false
			}
			if rec.State == idemDone {
				if rec.Error != nil {
					return nil, rec.Error, false
				}
				return rec.Result, nil, false
			}
			staleAt = time.Unix(0, rec.Until).Add(staleGrace)
			if !h.clock.now().Before(staleAt) {
				return nil, outcomeUnknown(), false
			}
		}
		now := h.clock.now()
		if !now.Before(deadline) {
			return nil, a.lateError(ctx, c, timeout), false
		}
		wake := deadline
		if !staleAt.IsZero() && staleAt.Before(wake) {
			wake = staleAt
		}
		if mustPoll {
			wake = earliest(wake, now.Add(poll.pause()))
		}
		timer, stop := h.clock.after(wake.Sub(now))
		select {
		case ch := <-w.changes:
			stop()
			if ch.gone {
				return nil, nil, true
			}
			heard = max(heard, ch.rev)
		case <-timer:
		case <-ctx.Done():
			stop()
			return nil, ctxError(ctx, c.Method, timeout), false
		}
	}
}

func earliest(t, u time.Time) time.Time {
	if u.Before(t) {
		return u
	}
	return t
}

// runAndStore runs a call whose record this aggregator created at rev, and
// stores its answer, or deletes the record when the answer is a retryable
// failure. The store is written even when the client has gone, so that
// the duplicates waiting for it are answered. The answer is kept only if
// it fits the bucket; otherwise the "answer not kept" record replaces the
// running one, which was written as large so that it fits a full bucket:
// a duplicate then learns that the call ran rather than running it again.
// A record whose call ran is never deleted: when even that write fails
// (a replicated bucket takes no write at all once full), the record is
// left running, and a duplicate is answered [outcomeUnknown] once it is
// stale.
func (a *Aggregator) runAndStore(ctx context.Context, h *idemHub, k, caller string, rev uint64, fp string,
	run func() ([]byte, *schema.Error)) ([]byte, *schema.Error) {
	result, rpcErr := run()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if retryable(rpcErr) {
		if err := h.kv.Delete(sctx, k, jetstream.LastRevision(rev)); err != nil {
			a.log.Warn("idempotency record not released", "err", err)
		}
		a.idemQuota.remove(caller, k)
		return result, rpcErr
	}
	done, err := json.Marshal(idemRecord{State: idemDone, Fingerprint: fp, Result: result, Error: rpcErr})
	if err == nil {
		if _, err = h.kv.Update(sctx, k, done, rev); err == nil {
			a.idemQuota.add(caller, k, len(done))
			return result, rpcErr
		}
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A write that timed out landed after all.
		return result, rpcErr
	}
	a.log.Warn("idempotency answer not stored, keeping a record that says so", "err", err)
	notKept := notKeptRecord(fp)
	retry := backoff{min: idemPollMin, max: idemPollMax}
	for {
		_, err = h.kv.Update(sctx, k, notKept, rev)
		if err == nil {
			a.idemQuota.add(caller, k, len(notKept))
			return result, rpcErr
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return result, rpcErr
		}
		wake, stop := h.clock.after(retry.pause())
		select {
		case <-wake:
		case <-sctx.Done():
			stop()
			a.log.Error("idempotency record left running: its call ran, but neither its answer nor a record saying so could be stored; "+
				"duplicates are told the call may have run once its deadline and a grace have passed", "err", err)
			return result, rpcErr
		}
	}
}

// runningRecord is the record of a call running until deadline, padded to
// be larger than the record that replaces it when its answer does not
// fit: a single JetStream server takes a value that replaces a larger one
// even in a full bucket, so the call that ran can always say so. (A
// replicated bucket takes no write once full: see [Aggregator.runAndStore].)
func runningRecord(fp string, deadline time.Time) []byte {
	rec := idemRecord{State: idemRunning, Fingerprint: fp, Until: deadline.UnixNano()}
	b, _ := json.Marshal(rec)
	if short := len(notKeptRecord(fp)) + recordSlack - len(b); short > 0 {
		rec.Pad = strings.Repeat(" ", short)
		b, _ = json.Marshal(rec)
	}
	return b
}

// notKeptRecord is the final record of a call that ran but whose answer
// did not fit.
func notKeptRecord(fp string) []byte {
	b, _ := json.Marshal(idemRecord{State: idemDone, Fingerprint: fp, Error: answerNotKept()})
	return b
}

// bucketTTL reads the TTL of kv's records.
func bucketTTL(kv jetstream.KeyValue) ttlFunc {
	return func(ctx context.Context) (time.Duration, error) {
		st, err := kv.Status(ctx)
		if err != nil {
			return 0, err
		}
		return st.TTL(), nil
	}
}

// storeRefused is the refusal of a call whose idempotency record cannot
// be written: it does not run without one.
func storeRefused(err error) *schema.Error {
	if bus.StoreFull(err) {
		return schema.NewError(schema.CodeUnavailable,
			"unavailable: the idempotency store is full (idempotency_max_bytes), so the call did not run; "+
				"send it again once older records expire, or without Idempotency-Key",
			map[string]any{"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonIdempotencyStoreFull,
				"limit": "idempotency_max_bytes"})
	}
	return schema.NewError(schema.CodeUnavailable,
		"unavailable: the idempotency store cannot record the call, so it did not run; send it again shortly",
		map[string]any{"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonIdempotencyStoreUnavailable})
}

// outcomeUnknown is what a duplicate is answered when the record of its
// key was left running: the call may have run, and is not run again.
func outcomeUnknown() *schema.Error {
	return schema.NewError(schema.CodeLimitExceeded,
		"limit exceeded: a call with this idempotency key started, but how it ended was not recorded "+
			"(the idempotency store was full (idempotency_max_bytes), or the ingress running it stopped); "+
			"it may have run, so it was not run again; send it with a new Idempotency-Key to run it",
		map[string]any{"limit": "idempotency_max_bytes", "reason": schema.ReasonIdempotencyOutcomeUnknown, "may_have_run": true})
}

// answerNotKept is what a duplicate is answered when the first call ran
// but its answer did not fit the store.
func answerNotKept() *schema.Error {
	return schema.NewError(schema.CodeLimitExceeded,
		"limit exceeded: a call with this idempotency key ran, but its answer could not be kept (idempotency_max_bytes); "+
			"it was not run again",
		map[string]any{"limit": "idempotency_max_bytes", "reason": schema.ReasonIdempotencyAnswerNotKept, "may_have_run": true})
}

// retryable reports whether an answer is a failure that sending the call
// again may cure, which an idempotency record must not keep.
func retryable(e *schema.Error) bool {
	if e == nil {
		return false
	}
	switch e.Code {
	case schema.CodeTimeout, schema.CodeOverloaded, schema.CodeUnavailable, schema.CodeCanceled, schema.CodeInternal:
		return true
	}
	return false
}

// idemHub is where the duplicates of an aggregator wait for the records
// held by other calls: one watch of the whole bucket, of updates only and
// without their values, however many wait, so that the JetStream consumers
// on the bucket do not grow with the duplicates. Each update tells the
// waiters of its key that the record changed, and they read it with a
// direct get; a waiter never holds up the watch. The watch starts with the
// first waiter and stops [idemWatchLinger] after the last one left; one
// that fails is made again with backoff, and each time one comes up every
// waiter reads its record again, so that what changed while none was up
// is not missed. It is safe for concurrent use.
type idemHub struct {
	kv    jetstream.KeyValue
	clock idemClock

	mu    sync.Mutex
	byKey map[string]map[*idemWaiter]struct{}
	n     int
	// stop ends the running watch loop; nil when none runs.
	stop func()
	// up is set while a watch is up: waiters then need not poll.
	up bool
	// idle stops the watch once it has had no waiter for idemWatchLinger.
	idle *time.Timer
	// closed: no watch starts again (IdempotencyStore.Close).
	closed bool
}

func newIdemHub(kv jetstream.KeyValue, clock idemClock) *idemHub {
	if clock == nil {
		clock = wallClock{}
	}
	return &idemHub{kv: kv, clock: clock, byKey: map[string]map[*idemWaiter]struct{}{}}
}

// idemChange tells a waiter that its record changed: at revision rev (0
// when a watch came up, and the record may have changed in any way), or
// that it was deleted.
type idemChange struct {
	rev  uint64
	gone bool
}

// idemWaiter is one duplicate waiting on a record. changes holds the
// newest change it has not taken yet.
type idemWaiter struct {
	h       *idemHub
	key     string
	changes chan idemChange
}

// wait registers a waiter on record k, and starts the watch if none runs;
// call stop when done.
func (h *idemHub) wait(k string, log *slog.Logger) *idemWaiter {
	w := &idemWaiter{h: h, key: k, changes: make(chan idemChange, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.byKey[k]
	if ws == nil {
		ws = map[*idemWaiter]struct{}{}
		h.byKey[k] = ws
	}
	ws[w] = struct{}{}
	h.n++
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.stop == nil && !h.closed {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		go h.run(ctx, log)
	}
	return w
}

// stop ends the wait.
func (w *idemWaiter) stop() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.byKey[w.key]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(h.byKey, w.key)
	}
	h.n--
	if h.n == 0 && h.stop != nil && h.idle == nil {
		h.idle = time.AfterFunc(idemWatchLinger, h.stopIdle)
	}
}

// close stops the watch loop for good. Every waiter is told to read its
// record again: with no watch up, it reads at intervals from then on.
func (h *idemHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	h.up = false
	for _, ws := range h.byKey {
		for w := range ws {
			latest.Offer(w.changes, idemChange{})
		}
	}
}

// watching reports whether a watch is up.
func (h *idemHub) watching() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// stopIdle stops the watch loop if it still has no waiter.
func (h *idemHub) stopIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.idle = nil
	if h.n == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// run keeps a watch of the records up until ctx ends or the connection
// closes.
func (h *idemHub) run(ctx context.Context, log *slog.Logger) {
	retry := backoff{min: idemWatchRetryMin, max: idemWatchRetryMax}
	for {
		w, stop, err := h.watch(ctx)
		if err == nil {
			h.setUp(true)
			h.pump(ctx, w)
			h.setUp(false)
			stop()
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) {
			// For good: waiters read at intervals until their
			// deadlines, and a new one tries again.
			h.mu.Lock()
			if h.stop != nil {
				h.stop()
				h.stop = nil
			}
			h.mu.Unlock()
			return
		}
		d := retry.pause()
		if err != nil {
			log.Warn("cannot watch the idempotency records; duplicates read them at intervals meanwhile", "retry_in", d, "err", err)
		} else {
			log.Warn("the watch of the idempotency records ended; watching again", "retry_in", d)
		}
		wake, stopTimer := h.clock.after(d)
		select {
		case <-wake:
		case <-ctx.Done():
			stopTimer()
			return
		}
	}
}

// setUp records whether a watch is up; when one comes up, every waiter is
// told to read its record again.
func (h *idemHub) setUp(up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if up && h.closed {
		return // closed meanwhile: the watch ends at once
	}
	h.up = up
	if !up {
		return
	}
	for _, ws := range h.byKey {
		for w := range ws {
			latest.Offer(w.changes, idemChange{})
		}
	}
}

// watch creates the watch of the records' updates from now on, without
// their values, and returns it with the function that stops it. The watch
// lives until it is stopped or ctx ends, but its creation is bounded by
// idemWatchCreateTimeout: a server that refuses the request for want of
// permission never answers it.
func (h *idemHub) watch(ctx context.Context) (jetstream.KeyWatcher, func(), error) {
	return bus.WatchWithin(ctx, h.kv, "call.>", idemWatchCreateTimeout, jetstream.UpdatesOnly(), jetstream.MetaOnly())
}

// pump tells the waiters of each updated key, until the watch ends or ctx
// does.
func (h *idemHub) pump(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			ch := idemChange{rev: e.Revision(), gone: e.Operation() != jetstream.KeyValuePut}
			h.mu.Lock()
			for waiter := range h.byKey[e.Key()] {
				latest.Offer(waiter.changes, ch)
			}
			h.mu.Unlock()
		}
	}
}

// idemClock is the time the waits on records go by.
type idemClock interface {
	now() time.Time
	// after returns a channel that receives once d has passed, and a
	// function that releases its timer early.
	after(d time.Duration) (<-chan time.Time, func())
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) now() time.Time { return time.Now() }

func (wallClock) after(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// backoff gives pauses that double from min up to max, each drawn between
// half the step and the whole of it, so that waiters that started together
// do not come back together. Its zero value is not ready: set min and max.
type backoff struct {
	min, max, next time.Duration
}

func (b *backoff) pause() time.Duration {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next = min(2*d, b.max)
	return d/2 + rand.N(d/2+1)
}
