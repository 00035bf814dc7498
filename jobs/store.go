package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of the stream and bucket.
const (
	// DefaultTTL is how long a finished job's record is kept.
	DefaultTTL = 24 * time.Hour
	// DefaultReplicas is the replica count of the stream and bucket: one,
	// as a single server (the embedded one) can hold. Use 3 on a cluster.
	DefaultReplicas = 1
	// DefaultMaxQueued is the most jobs waiting in the queue stream.
	DefaultMaxQueued = 1_000_000
	// DefaultQueueMaxBytes and DefaultRecordsMaxBytes are the byte caps
	// of the queue stream (job_queue_max_bytes) and of the bucket of
	// records (job_records_max_bytes), so that together with the
	// idempotency bucket they stay within the JetStream store.
	DefaultQueueMaxBytes   int64 = 1 << 30
	DefaultRecordsMaxBytes int64 = 1 << 30
	// DuplicateWindow is how long the queue stream remembers a job id, so
	// that publishing the same job twice within it queues it once.
	DuplicateWindow = 2 * time.Minute
	// markerTTL is how long the bucket keeps the marker of a record that
	// expired; JetStream needs it for per-key TTLs and never accepts less
	// than a second.
	markerTTL = time.Minute
)

// names are the JetStream names of one cluster's jobs, all derived from the
// cluster's subjects so that several clusters can share a NATS.
type names struct {
	subjects bus.Subjects
	// prefix is subjects' prefix, which begins every subject of jobs.
	prefix string
	// stream is the work-queue stream of pending jobs and callbacks.
	stream string
	// bucket is the KV bucket of job records and idempotency entries.
	bucket string
}

func newNames(s bus.Subjects) names {
	token := s.Token()
	return names{subjects: s, prefix: s.Prefix(), stream: strings.ToUpper(token) + "_JOBS", bucket: token + "_jobs"}
}

// runSubject is the subject a job of method was queued on before jobs
// were queued per caller ([names.queueSubject]); runners still take the
// jobs left there, and the durable consumer of each served pattern on it
// tells which methods run as jobs.
func (n names) runSubject(method string) string { return n.prefix + ".jobs.run." + method }

// runFilter is the subject a runner serving pattern ("math.*") fetches from.
func (n names) runFilter(pattern string) (string, error) {
	call, err := n.subjects.CallPattern(pattern)
	if err != nil {
		return "", err
	}
	return n.runSubject(strings.TrimPrefix(call, n.prefix+".call.")), nil
}

// notifySubject carries one message per finished job whose callback is due.
func (n names) notifySubject() string { return n.prefix + ".jobs.notify" }

// cancelSubject is the core NATS subject a cancel of a running job is
// announced on, so its runner can cancel the handler at once.
func (n names) cancelSubject(id string) string { return n.prefix + ".jobs.cancel." + id }

func (n names) cancelWildcard() string { return n.prefix + ".jobs.cancel.*" }

func jobKey(id string) string { return "job." + id }

// storeConfig is what setup creates the stream and bucket with.
type storeConfig struct {
	replicas     int
	maxQueued    int64
	queueBytes   int64
	recordsBytes int64
}

func defaultStoreConfig() storeConfig {
	return storeConfig{replicas: DefaultReplicas, maxQueued: DefaultMaxQueued,
		queueBytes: DefaultQueueMaxBytes, recordsBytes: DefaultRecordsMaxBytes}
}

func (n names) streamConfig(c storeConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        n.stream,
		Description: "toolbus jobs waiting to run and callbacks waiting to be sent",
		Subjects:    []string{n.prefix + ".jobs.queue.>", n.prefix + ".jobs.run.>", n.notifySubject()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.replicas,
		MaxMsgs:     c.maxQueued,
		MaxBytes:    c.queueBytes,
		Discard:     jetstream.DiscardNew,
		Duplicates:  DuplicateWindow,
	}
}

func (n names) bucketConfig(c storeConfig) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      n.bucket,
		Description: "toolbus job records",
		// One revision per key: compare-and-set needs no more, and a
		// record's expiry (a TTL on its last revision) removes it whole.
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       c.replicas,
		MaxBytes:       c.recordsBytes,
		LimitMarkerTTL: markerTTL,
	}
}

// store is the stream and bucket of one cluster's jobs.
type store struct {
	js     jetstream.JetStream
	names  names
	stream jetstream.Stream
	kv     jetstream.KeyValue
	// replicated is set when the bucket has more than one replica, any of
	// which may answer a read (see get).
	replicated bool
	// known is the newest revision of each key this process wrote or saw
	// lately, against which a read is checked.
	known revisions
}

// openStore makes sure the stream and bucket exist. With update it also
// brings an existing stream and bucket to c (the service does, as the owner
// of the limits); without, it creates them only when missing (a runner
// starting before any service).
//
// An update is sent only when the configuration differs, which the server
// tells when asked to create what exists: every service that starts would
// otherwise rewrite the stream's configuration (on a JetStream cluster, a
// proposal to its meta group), and nats-server (2.15.3 at least) reads a
// stream's configuration without its lock while it creates a consumer, so
// that an update beside a runner creating its consumers is a data race.
func openStore(ctx context.Context, js jetstream.JetStream, n names, c storeConfig, update bool) (*store, error) {
	if o := js.Options(); o.APIPrefix != "" || o.Domain != "" {
		return nil, errors.New("jobs: JetStream domains and API prefixes are not supported")
	}
	s := &store{js: js, names: n}
	var err error
	if update {
		s.stream, err = js.CreateStream(ctx, n.streamConfig(c))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s.stream, err = js.CreateOrUpdateStream(ctx, n.streamConfig(c))
		}
	} else if s.stream, err = js.Stream(ctx, n.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		s.stream, err = js.CreateStream(ctx, n.streamConfig(c))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s.stream, err = js.Stream(ctx, n.stream)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// A request the server refuses for want of permission is
			// never answered.
			return nil, fmt.Errorf("jobs: stream %s does not exist yet, and creating it got no answer: a NATS user that may not create it (the worker of deploy/nats/cluster-secure.conf) waits for an ingress to: %w", n.stream, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: stream %s: %w", n.stream, err)
	}
	if update {
		s.kv, err = bus.KeyValue(ctx, js, n.bucketConfig(c))
	} else if s.kv, err = js.KeyValue(ctx, n.bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
		s.kv, err = js.CreateKeyValue(ctx, n.bucketConfig(c))
		if errors.Is(err, jetstream.ErrBucketExists) {
			s.kv, err = js.KeyValue(ctx, n.bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: bucket %s: %w", n.bucket, err)
	}
	s.replicated = replicated(ctx, s.kv)
	return s, nil
}

// replicated reports whether kv has more than one replica; when the
// server cannot say, it assumes so, which only costs a missing record a
// few more reads.
func replicated(ctx context.Context, kv jetstream.KeyValue) bool {
	st, err := kv.Status(ctx)
	if b, ok := st.(*jetstream.KeyValueBucketStatus); err == nil && ok && b.StreamInfo() != nil {
		return b.StreamInfo().Config.Replicas > 1
	}
	return true
}

// errNotFound is returned by get for a job that does not exist or has
// expired.
var errNotFound = errors.New("jobs: job not found")

// errStale is returned by get when every replica that answered lags
// behind a revision this process knows of.
var errStale = errors.New("jobs: the bucket's replicas lag behind its latest write")

// Reads again of a record a lagging replica answered: at most staleReads
// reads in all, the first staleBackoff apart, each wait twice the last
// (about a third of a second in all); a record missing with nothing known
// of it is read missingReads times on a replicated bucket (70ms).
const (
	staleReads   = 6
	missingReads = 3
	staleBackoff = 10 * time.Millisecond
)

// get reads a record and its revision with a direct get, the bucket's
// cheapest read, which needs no consumer and which any replica of a
// replicated bucket may answer. Such a replica may lag behind its leader,
// so the answer is checked against the newest revision of the key this
// process wrote or saw on its watch ([revisions]): a record older than
// that is read again, briefly apart, until a replica that has caught up
// answers, and is [errStale] if none does; on a replicated bucket, a
// record found missing is read again too (a job just submitted through
// another ingress), and is [errNotFound] if it stays so.
func (s *store) get(ctx context.Context, id string) (*stored, uint64, error) {
	key := jobKey(id)
	wait := staleBackoff
	for attempt := 1; ; attempt++ {
		known := s.known.newest(key)
		e, err := s.kv.Get(ctx, key)
		missing := errors.Is(err, jetstream.ErrKeyNotFound)
		if err != nil && !missing {
			return nil, 0, fmt.Errorf("jobs: read job %s: %w", id, err)
		}
		tries := staleReads
		switch {
		case missing && (!s.replicated || known.gone):
			return nil, 0, errNotFound
		case missing && known.rev == 0:
			tries = missingReads
		case !missing && e.Revision() >= known.rev:
			var r stored
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return nil, 0, fmt.Errorf("jobs: decode job %s: %w", id, err)
			}
			return &r, e.Revision(), nil
		}
		switch {
		case attempt < tries:
		case missing:
			return nil, 0, errNotFound
		default:
			return nil, 0, fmt.Errorf("jobs: read job %s at revision %d or later: %w", id, known.rev, errStale)
		}
		if !ctxwait.Sleep(ctx, wait) {
			return nil, 0, fmt.Errorf("jobs: read job %s: %w", id, ctx.Err())
		}
		wait *= 2
	}
}

// create writes a new record; it fails with jetstream.ErrKeyExists when the
// job is already there.
func (s *store) create(ctx context.Context, r *stored) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("jobs: encode job %s: %w", r.ID, err)
	}
	rev, err := s.kv.Create(ctx, jobKey(r.ID), b)
	if err == nil {
		s.known.note(jobKey(r.ID), rev, false)
	}
	return rev, err
}

// knownWindow is how long [revisions] remembers a key's newest revision at
// least: far longer than a replica that still answers direct gets lags
// behind its leader.
const knownWindow = 10 * time.Second

// revisions remembers the newest revision this process wrote or saw of
// each key lately: for at least [knownWindow] and at most twice that, in
// two maps that take turns, so that it holds no more than the keys written
// in the last two windows. The zero value is ready; it is safe for
// concurrent use.
type revisions struct {
	mu sync.Mutex
	// since is when cur began; prev holds the window before it.
	since     time.Time
	cur, prev map[string]revision
}

// revision is a key's revision, at which it was deleted or expired when
// gone is set.
type revision struct {
	rev  uint64
	gone bool
}

// note records revision rev of key unless a newer one is known.
func (k *revisions) note(key string, rev uint64, gone bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.turn(time.Now())
	if k.lookup(key).rev >= rev {
		return
	}
	if k.cur == nil {
		k.cur = map[string]revision{}
	}
	k.cur[key] = revision{rev: rev, gone: gone}
}

// newest returns the newest revision known of key, zero when none is.
func (k *revisions) newest(key string) revision {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.turn(time.Now())
	return k.lookup(key)
}

func (k *revisions) lookup(key string) revision {
	if r, ok := k.cur[key]; ok {
		return r
	}
	return k.prev[key]
}

// turn starts a new window when the current one is over. k.mu is held.
func (k *revisions) turn(now time.Time) {
	switch age := now.Sub(k.since); {
	case age >= 2*knownWindow:
		k.cur, k.prev, k.since = nil, nil, now
	case age >= knownWindow:
		k.cur, k.prev, k.since = nil, k.cur, now
	}
}

// errSkip, returned by a mutation, leaves the record as it is.
var errSkip = errors.New("jobs: record left unchanged")

// maxCASRounds bounds how often update retries after a concurrent writer.
const maxCASRounds = 16

// update applies mutate to the latest record and writes it back only if
// nobody wrote in between, trying again on a conflict, so that a cancel
// and a completion never overwrite each other: each sees the other's write
// and decides anew. mutate returns errSkip to leave the record alone (then
// update returns the record as read and errSkip); that decision is made on
// a record no older than any this process wrote or saw lately (see get),
// so that a runner never takes a lagging replica's copy of the record from
// before its own run for another run's. A record in a final state is
// written with its TTL, so finished jobs expire and running ones never do.
func (s *store) update(ctx context.Context, id string, mutate func(r *stored) error) (*stored, error) {
	for range maxCASRounds {
		r, rev, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := mutate(r); err != nil {
			return r, err
		}
		err = s.write(ctx, r, rev)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("jobs: update job %s: still conflicting after %d attempts", id, maxCASRounds)
}

// write stores r if the key is still at revision rev. It publishes to the
// bucket's subject directly rather than through KeyValue.Update because
// only a publish can carry a per-message TTL with the revision check.
func (s *store) write(ctx context.Context, r *stored, rev uint64) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("jobs: encode job %s: %w", r.ID, err)
	}
	return s.putKey(ctx, jobKey(r.ID), b, rev, r.State.Final(), r.ttl())
}

// putKey writes value under key if the key is at revision rev; with final
// the message carries the TTL, after which JetStream removes it.
func (s *store) putKey(ctx context.Context, key string, value []byte, rev uint64, final bool, ttl time.Duration) error {
	msg := &nats.Msg{Subject: "$KV." + s.names.bucket + "." + key, Header: nats.Header{}, Data: value}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(rev)}
	if final && ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	ack, err := s.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return fmt.Errorf("jobs: write %s: %w", key, err)
	}
	s.known.note(key, ack.Sequence, false)
	return nil
}

// isConflict reports whether err is a failed revision check.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// finished does what follows a job reaching its final state r: it queues
// the completion callback when the job has a notify_url, and gives the
// idempotency entry the record's TTL so that both expire together. A
// failure is logged: the record, which holds the result, is already
// written, and a redelivered queue message finds it and tries again.
func (s *store) finished(ctx context.Context, r *stored, log *slog.Logger) {
	if r.NotifyURL != "" && r.Callback != nil && r.Callback.State == schema.JobCallbackPending && r.Callback.Attempts == 0 {
		if err := s.queueCallback(ctx, r.ID); err != nil {
			log.Error("queue a completion callback", "id", r.ID, "err", err)
		}
	}
	if r.IdemKey != "" {
		if err := s.expireKey(ctx, r.IdemKey, r.ttl()); err != nil {
			log.Warn("set the expiry of an idempotency key", "id", r.ID, "err", err)
		}
	}
}

// queueCallback queues the callback of job id, once per [DuplicateWindow].
func (s *store) queueCallback(ctx context.Context, id string) error {
	b, _ := json.Marshal(idemEntry{ID: id})
	msg := &nats.Msg{Subject: s.names.notifySubject(), Data: b}
	_, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID("notify-"+id), jetstream.WithExpectStream(s.names.stream))
	return err
}

// expireKey rewrites key unchanged with a TTL.
func (s *store) expireKey(ctx context.Context, key string, ttl time.Duration) error {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.putKey(ctx, key, e.Value(), e.Revision(), true, ttl)
}
