package aggregator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
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

// storeTimeout bounds one write of an idempotency record.
const storeTimeout = 5 * time.Second

// IdempotencyBucket creates, or opens, the JetStream key-value bucket of
// idempotency records of the cluster with subject prefix prefix: every
// ingress replica of the cluster must use the same one. A record expires
// ttl after its last write (zero means [DefaultIdempotencyTTL]); choose a
// ttl longer than the longest call. replicas is the bucket's JetStream
// replica count (zero means 1; 3 on a three-node cluster). maxBytes caps
// the bucket (zero means [DefaultIdempotencyMaxBytes]): once it is full a
// call with an idempotency key is refused -32003 rather than run without
// its record, and the rest of the JetStream store stays for jobs.
func IdempotencyBucket(ctx context.Context, js jetstream.JetStream, prefix string, ttl time.Duration, replicas int, maxBytes int64) (jetstream.KeyValue, error) {
	if ttl < 0 || replicas < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("aggregator: idempotency ttl, replicas and max bytes must not be negative, got %v, %d and %d", ttl, replicas, maxBytes)
	}
	if ttl == 0 {
		ttl = DefaultIdempotencyTTL
	}
	if maxBytes == 0 {
		maxBytes = DefaultIdempotencyMaxBytes
	}
	s, err := bus.NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	kv, err := bus.KeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      s.Token() + "_idem",
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

// WithIdempotency keeps idempotency records in kv (see [IdempotencyBucket])
// for calls that carry a [schema.Call.IdempotencyKey] (default: keys are
// ignored). A duplicate of a call in flight, on this or any other
// aggregator sharing kv, waits for the first and gets its answer; a
// duplicate of a finished call gets the stored answer. A retryable failure
// (a timeout, unavailability, overload, cancellation) is not stored, so
// that sending the call again runs it again. A key sent again with a different method or params is
// answered -32600. When the store cannot record the call (unreachable, or
// full), the call is refused -32003, retryable, and does not run: a
// safety feature that cannot work never runs the call unprotected, unless
// [WithIdempotencyFailOpen] says so. Each caller may hold a bounded number
// of records ([WithIdempotencyCallerLimits]).
func WithIdempotency(kv jetstream.KeyValue) Option {
	return func(c *config) error {
		if kv == nil {
			return errors.New("aggregator: nil idempotency bucket")
		}
		s := &IdempotencyStore{}
		s.Open(kv)
		c.idem = s
		return nil
	}
}

// WithIdempotencyStore is [WithIdempotency] for a bucket that is opened
// after the aggregator starts, as it is when JetStream is not up yet: a
// call carrying an idempotency key is refused with -32003 (retryable,
// naming what the store waits for) until [IdempotencyStore.Open] is
// called. It never runs without its record.
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
	mu      sync.Mutex
	kv      jetstream.KeyValue
	waiting string
}

// Open makes the store use kv from now on.
func (s *IdempotencyStore) Open(kv jetstream.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv = kv
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
	// still running after it was left by an aggregator that died.
	Until  int64           `json:"until,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *schema.Error   `json:"error,omitempty"`
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
	fp := fingerprint(c)
	deadline, _ := ctx.Deadline()
	running, _ := json.Marshal(idemRecord{State: idemRunning, Fingerprint: fp, Until: deadline.UnixNano()})
	for {
		if e := a.idemQuota.admit(ctx, c.Caller, k, bucketTTL(kv)); e != nil {
			return nil, e
		}
		rev, err := kv.Create(ctx, k, running)
		if err == nil {
			a.idemQuota.add(c.Caller, k, len(k)+len(running))
			return a.runAndStore(ctx, kv, k, c.Caller, rev, fp, run)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if ctx.Err() != nil {
				return nil, a.ctxError(ctx, c, timeout)
			}
			if a.idemFailOpen {
				a.log.Warn("idempotency store cannot record the call, running it without a record (fail-open)", "method", c.Method, "err", err)
				return run()
			}
			a.log.Warn("idempotency store cannot record the call, refused", "method", c.Method, "err", err)
			return nil, storeRefused(err)
		}
		result, rpcErr, claimed, rev := a.await(ctx, c, kv, k, fp, running)
		if claimed {
			return a.runAndStore(ctx, kv, k, c.Caller, rev, fp, run)
		}
		if result != nil || rpcErr != nil {
			return result, rpcErr
		}
		if ctx.Err() != nil {
			return nil, a.ctxError(ctx, c, timeout)
		}
		// The record went away (its call failed in a retryable way, or
		// expired): try to claim it again.
	}
}

// await watches record k held by another call until it is done (its
// answer is returned), deleted (all results nil), or left running past its
// deadline by an aggregator that is gone (claimed, with the new revision).
func (a *Aggregator) await(ctx context.Context, c *schema.Call, kv jetstream.KeyValue, k, fp string, running []byte) (result []byte, rpcErr *schema.Error, claimed bool, rev uint64) {
	w, err := kv.Watch(ctx, k)
	if err != nil {
		return nil, nil, false, 0
	}
	defer w.Stop()
	var stale *time.Timer
	defer func() {
		if stale != nil {
			stale.Stop()
		}
	}()
	var staleC <-chan time.Time
	var last jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, false, 0
			}
			if e == nil {
				continue // the end of the current values
			}
			if e.Operation() != jetstream.KeyValuePut {
				return nil, nil, false, 0
			}
			var rec idemRecord
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				return nil, schema.Errorf(schema.CodeInternal, "internal error: bad idempotency record: %v", err), false, 0
			}
			if rec.Fingerprint != fp {
				return nil, schema.NewError(schema.CodeInvalidRequest,
					"invalid request: the idempotency key was used for another call",
					map[string]any{"reason": schema.ReasonIdempotencyKeyReused, "method": c.Method}), false, 0
			}
			if rec.State == idemDone {
				if rec.Error != nil {
					return nil, rec.Error, false, 0
				}
				return rec.Result, nil, false, 0
			}
			last = e
			if stale != nil {
				stale.Stop()
			}
			stale = time.NewTimer(time.Until(time.Unix(0, rec.Until)) + time.Second)
			staleC = stale.C
		case <-staleC:
			rev, err := kv.Update(ctx, k, running, last.Revision())
			if err == nil {
				return nil, nil, true, rev
			}
			staleC = nil // another aggregator took it over; watch on
		case <-ctx.Done():
			return nil, nil, false, 0
		}
	}
}

// runAndStore runs a call whose record this aggregator claimed at rev, and
// stores its answer, or deletes the record when the answer is a retryable
// failure. The store is written even when the client has gone, so that
// the duplicates waiting for it are answered. An answer the store cannot
// take (the bucket is full) is replaced in the record by a small one that
// says so: a duplicate then learns that the call ran rather than running
// it again.
func (a *Aggregator) runAndStore(ctx context.Context, kv jetstream.KeyValue, k, caller string, rev uint64, fp string,
	run func() ([]byte, *schema.Error)) ([]byte, *schema.Error) {
	result, rpcErr := run()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if retryable(rpcErr) {
		if err := kv.Delete(sctx, k, jetstream.LastRevision(rev)); err != nil {
			a.log.Warn("idempotency record not released", "err", err)
		}
		a.idemQuota.remove(caller, k)
		return result, rpcErr
	}
	done, err := json.Marshal(idemRecord{State: idemDone, Fingerprint: fp, Result: result, Error: rpcErr})
	if err == nil {
		_, err = kv.Update(sctx, k, done, rev)
	}
	if err != nil {
		a.log.Warn("idempotency record not stored, keeping a record without the answer", "err", err)
		done, _ = json.Marshal(idemRecord{State: idemDone, Fingerprint: fp, Error: answerNotKept()})
		_, err = kv.Update(sctx, k, done, rev)
	}
	if err != nil {
		a.log.Warn("idempotency record not stored", "err", err)
		// A duplicate must not wait on a record that will never finish.
		_ = kv.Delete(sctx, k)
		a.idemQuota.remove(caller, k)
		return result, rpcErr
	}
	a.idemQuota.add(caller, k, len(done))
	return result, rpcErr
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
