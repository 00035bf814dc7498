package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Defaults of [WithIdempotencyCallerLimits].
const (
	DefaultIdempotencyCallerMaxRecords       = 10_000
	DefaultIdempotencyCallerMaxBytes   int64 = DefaultIdempotencyMaxBytes / 4
)

// WithIdempotencyCallerLimits bounds the idempotency records one named
// caller holds, in number and in bytes (defaults
// [DefaultIdempotencyCallerMaxRecords] and
// [DefaultIdempotencyCallerMaxBytes]): a call with a new key past either is
// refused -32006 naming idempotency_caller_max_records or
// idempotency_caller_max_bytes, with retry_after_ms until the caller's
// oldest record expires, and does not run. The bucket's own byte cap
// ([IdempotencyBucket]) bounds all callers together; this keeps one caller
// from filling it for the others.
//
// The count is kept by each aggregator (each ingress replica) for the
// records it wrote, and starts afresh when it starts: a caller spread over
// n replicas may hold up to n times the bound, which the bucket's cap
// still bounds. The empty caller of an ingress without authentication has
// no bound of its own: its share is the whole bucket.
func WithIdempotencyCallerLimits(records int, bytes int64) Option {
	return func(c *config) error {
		if records < 1 || bytes < 1<<10 {
			return fmt.Errorf("aggregator: idempotency caller limits must be at least 1 record and 1 KiB, got %d and %d", records, bytes)
		}
		c.idemRecords, c.idemBytes = records, bytes
		return nil
	}
}

// WithIdempotencyFailOpen makes a call with an idempotency key that the
// store cannot record (it is unreachable, or full) run without a record,
// as if it carried no key, instead of being refused -32003 (default off).
// A client that retries such a call may then run it twice: turn it on only
// for tools where that is harmless.
func WithIdempotencyFailOpen(on bool) Option {
	return func(c *config) error {
		c.idemFailOpen = on
		return nil
	}
}

// idemLedger counts the idempotency records each named caller holds in the
// bucket, as this aggregator wrote them, until they expire. It is safe for
// concurrent use; a nil ledger bounds nothing.
type idemLedger struct {
	maxRecords int
	maxBytes   int64
	now        func() time.Time

	mu      sync.Mutex
	ttl     time.Duration // the bucket's, read once
	callers map[string]*callerRecords
}

// callerRecords are one caller's records: by key, and in the order they
// expire (a record's TTL runs from its last write, so each write moves it
// to the back).
type callerRecords struct {
	bytes int64
	byKey map[string]*ledgerEntry
	queue []*ledgerEntry
	gone  int // entries of queue that are gone
}

type ledgerEntry struct {
	key     string
	bytes   int64
	expires time.Time
	gone    bool // replaced by a later write, or deleted
}

func newIdemLedger(records int, bytes int64) *idemLedger {
	return &idemLedger{maxRecords: records, maxBytes: bytes, now: time.Now, callers: map[string]*callerRecords{}}
}

// ttlFunc returns the bucket's TTL; it is asked once.
type ttlFunc func(ctx context.Context) (time.Duration, error)

// admit returns the refusal of a new record k of caller past its bounds,
// or nil. A key the caller holds already is always admitted: it names a
// duplicate, or the same call again.
func (l *idemLedger) admit(ctx context.Context, caller, k string, ttl ttlFunc) *schema.Error {
	if l == nil || caller == "" {
		return nil
	}
	if err := l.knowTTL(ctx, ttl); err != nil {
		return storeRefused(err)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	cr := l.callers[caller]
	if cr == nil {
		return nil
	}
	l.prune(caller, cr, now)
	if _, ok := cr.byKey[k]; ok {
		return nil
	}
	var limit, what string
	var bound, got int64
	switch {
	case len(cr.byKey) >= l.maxRecords:
		limit, what, bound, got = "idempotency_caller_max_records", "records", int64(l.maxRecords), int64(len(cr.byKey))
	case cr.bytes >= l.maxBytes:
		limit, what, bound, got = "idempotency_caller_max_bytes", "bytes of records", l.maxBytes, cr.bytes
	default:
		return nil
	}
	wait := time.Second
	for _, e := range cr.queue {
		if !e.gone {
			wait = max(e.expires.Sub(now), time.Millisecond)
			break
		}
	}
	return schema.NewError(schema.CodeLimitExceeded,
		fmt.Sprintf("limit exceeded: this caller holds %d %s of idempotency, at most %d on this ingress (%s), so the call did not run; "+
			"send it without Idempotency-Key, or again once older records expire", got, what, bound, limit),
		map[string]any{"limit": limit, "max": bound, "got": got, "retryable": true, "retry_after_ms": wait.Milliseconds()})
}

// knowTTL reads the bucket's TTL the first time it is needed.
func (l *idemLedger) knowTTL(ctx context.Context, ttl ttlFunc) error {
	l.mu.Lock()
	known := l.ttl > 0
	l.mu.Unlock()
	if known {
		return nil
	}
	d, err := ttl(ctx)
	if err != nil {
		return fmt.Errorf("read the idempotency bucket's ttl: %w", err)
	}
	if d <= 0 {
		return errors.New("the idempotency bucket keeps records for ever")
	}
	l.mu.Lock()
	l.ttl = d
	l.mu.Unlock()
	return nil
}

// add records a write of n bytes to record k of caller, which expires a
// TTL from now.
func (l *idemLedger) add(caller, k string, n int) {
	if l == nil || caller == "" {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	cr := l.callers[caller]
	if cr == nil {
		cr = &callerRecords{byKey: map[string]*ledgerEntry{}}
		l.callers[caller] = cr
	}
	if old := cr.byKey[k]; old != nil {
		old.gone = true
		cr.gone++
		cr.bytes -= old.bytes
	}
	e := &ledgerEntry{key: k, bytes: int64(n), expires: now.Add(l.ttl)}
	cr.byKey[k] = e
	cr.queue = append(cr.queue, e)
	cr.bytes += e.bytes
}

// remove forgets record k of caller, deleted from the bucket.
func (l *idemLedger) remove(caller, k string) {
	if l == nil || caller == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cr := l.callers[caller]
	if cr == nil {
		return
	}
	if e := cr.byKey[k]; e != nil {
		e.gone = true
		cr.gone++
		cr.bytes -= e.bytes
		delete(cr.byKey, k)
	}
	l.prune(caller, cr, l.now())
}

// prune drops the records that expired, and the caller once it holds
// none; when most of the queue is entries gone since, it is compacted, so
// that calls written and deleted again and again (retryable failures) do
// not grow it. l.mu is held.
func (l *idemLedger) prune(caller string, cr *callerRecords, now time.Time) {
	i := 0
	for ; i < len(cr.queue); i++ {
		e := cr.queue[i]
		if e.gone {
			cr.gone--
			continue
		}
		if e.expires.After(now) {
			break
		}
		e.gone = true
		cr.bytes -= e.bytes
		delete(cr.byKey, e.key)
	}
	cr.queue = cr.queue[i:]
	if len(cr.byKey) == 0 {
		delete(l.callers, caller)
		return
	}
	if cr.gone > len(cr.byKey)+16 {
		live := make([]*ledgerEntry, 0, len(cr.byKey))
		for _, e := range cr.queue {
			if !e.gone {
				live = append(live, e)
			}
		}
		cr.queue, cr.gone = live, 0
	}
}
