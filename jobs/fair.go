package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/schema"
)

// Fair dispatch across callers.
//
// Each caller's jobs wait on subjects of their own,
// "P.jobs.queue.<caller token>.<method>", and are taken through one durable
// consumer per served pattern and caller. A [fairQueue] hands out the next
// job of the callers with jobs waiting, one caller after the other: a
// caller with 20,000 jobs queued gets one free slot, the next caller with
// any gets the next, so another caller's new job waits for about one job's
// run per slot rather than for the whole queue. Within a caller, jobs run
// in the order they were submitted.
//
// Every durability promise stays JetStream's: a job is a message of the
// work-queue stream until a runner acknowledges it after writing its
// outcome; the consumers are durable, with the stream's replicas, and a
// lease (AckWait) after which a job whose runner died is delivered again.
// The queue only chooses which caller's consumer is asked next.
//
// A service rings "P.jobs.ready.<caller token>.<method>" (core NATS) after
// queueing a job, so a runner with nothing to do asks that caller's
// consumer at once; a runner also lists the callers with jobs waiting from
// the stream's subjects every so often, which finds the jobs of a missed
// ring, of a restart, and those given back by a runner that died.

// callerToken is the subject token of a caller's jobs: a digest, so that
// any caller name makes one valid token and none is spelled on the bus.
func callerToken(caller string) string {
	sum := sha256.Sum256([]byte(caller))
	return hex.EncodeToString(sum[:8])
}

// queueSubject is the subject a job of method is queued on for caller.
func (n names) queueSubject(caller, method string) string {
	return n.prefix + ".jobs.queue." + callerToken(caller) + "." + method
}

// queueCallerFilter is every subject of one caller's jobs.
func (n names) queueCallerFilter(token string) string {
	return n.prefix + ".jobs.queue." + token + ".>"
}

// readySubject is rung after a job of method is queued for caller.
func (n names) readySubject(caller, method string) string {
	return n.prefix + ".jobs.ready." + callerToken(caller) + "." + method
}

// patternTail is the subject form of a served pattern, after the prefix:
// "math.*" stays "math.*".
func (n names) patternTail(pattern string) (string, error) {
	filter, err := n.runFilter(pattern)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(filter, n.prefix+".jobs.run."), nil
}

// consumerIdle is how long a caller's consumer may go unused before the
// server removes it: longer than a day, so that it outlives the longest
// run of any of its jobs ([DefaultMaxRunTime] is an hour), and a caller
// that comes back gets a new one.
const consumerIdle = 25 * time.Hour

// fairQueue hands out the jobs of one served pattern, one caller after the
// other. It is safe for concurrent use; [fairQueue.next] is meant for one
// goroutine.
type fairQueue struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	names    names
	pattern  string
	tail     string
	template jetstream.ConsumerConfig
	scanned  func() time.Duration // how long between listings of the stream
	log      *slog.Logger
	bell     chan struct{}

	mu        sync.Mutex
	consumers map[string]jetstream.Consumer // by caller token
	ring      []string                      // callers that may have jobs, in turn order
	last      string                        // the caller served last
	rung      map[string]bool               // callers rung since they were last asked
	lastScan  time.Time
}

// newFairQueue returns the queue of pattern's jobs on st; template holds
// the consumers' ack settings.
func newFairQueue(js jetstream.JetStream, st jetstream.Stream, n names, pattern string, template jetstream.ConsumerConfig,
	scanEvery time.Duration, log *slog.Logger) (*fairQueue, error) {
	tail, err := n.patternTail(pattern)
	if err != nil {
		return nil, err
	}
	return &fairQueue{
		js: js, stream: st, names: n, pattern: pattern, tail: tail, template: template,
		scanned: func() time.Duration { return scanEvery }, log: log,
		bell: make(chan struct{}, 1), consumers: map[string]jetstream.Consumer{}, rung: map[string]bool{},
	}, nil
}

// serves reports whether jobs of method are the queue's.
func (q *fairQueue) serves(method string) bool { return schema.MatchMethod(q.tail, method) }

// wake puts caller token's turn in the ring and wakes the queue.
func (q *fairQueue) wake(token string) {
	q.mu.Lock()
	q.rung[token] = true
	if !slices.Contains(q.ring, token) {
		q.ring = append(q.ring, token)
	}
	q.mu.Unlock()
	select {
	case q.bell <- struct{}{}:
	default:
	}
}

// next returns the next job in turn, waiting for one; nil once stop is
// closed.
func (q *fairQueue) next(ctx context.Context, stop <-chan struct{}) jetstream.Msg {
	for {
		q.mu.Lock()
		due := time.Since(q.lastScan) >= q.scanned()
		q.mu.Unlock()
		if due {
			q.scan(ctx)
		}
		if msg := q.round(ctx, stop); msg != nil {
			return msg
		}
		timer := time.NewTimer(q.scanned())
		select {
		case <-q.bell:
		case <-timer.C:
		case <-stop:
			timer.Stop()
			return nil
		}
		timer.Stop()
	}
}

// round asks each caller in the ring once, from the one after the caller
// served last, and returns the first job any of them has. A caller whose
// consumer has nothing to give leaves the ring until it is rung or listed
// again.
func (q *fairQueue) round(ctx context.Context, stop <-chan struct{}) jetstream.Msg {
	q.mu.Lock()
	tokens := slices.Clone(q.ring)
	start := slices.Index(tokens, q.last) + 1 // 0 when it left the ring
	q.mu.Unlock()
	for i := range tokens {
		select {
		case <-stop:
			return nil
		default:
		}
		tok := tokens[(start+i)%len(tokens)]
		q.mu.Lock()
		delete(q.rung, tok)
		q.mu.Unlock()
		msg, err := q.fetch(ctx, tok)
		if msg != nil {
			q.mu.Lock()
			q.last = tok
			q.mu.Unlock()
			return msg
		}
		if err != nil {
			if ctx.Err() == nil { // not a shutdown
				q.log.Warn("fetch a caller's jobs", "pattern", q.pattern, "err", err)
			}
			continue
		}
		q.leave(tok)
	}
	return nil
}

// leave takes a caller with nothing to give out of the ring, unless it was
// rung since it was asked.
func (q *fairQueue) leave(tok string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rung[tok] {
		return
	}
	if j := slices.Index(q.ring, tok); j >= 0 {
		q.ring = slices.Delete(q.ring, j, j+1)
	}
}

// fetch takes one job of caller tok without waiting: nil and no error when
// it has none to give now.
func (q *fairQueue) fetch(ctx context.Context, tok string) (jetstream.Msg, error) {
	cons, err := q.consumer(ctx, tok)
	if err != nil {
		return nil, err
	}
	batch, err := cons.FetchNoWait(1)
	if err == nil {
		for msg := range batch.Messages() {
			return msg, nil
		}
		err = batch.Error()
	}
	switch {
	case err == nil, errors.Is(err, jetstream.ErrNoMessages):
		return nil, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
		// Removed as idle; the next turn makes it again.
		q.mu.Lock()
		delete(q.consumers, tok)
		q.mu.Unlock()
	}
	return nil, err
}

// consumer returns caller tok's consumer of the pattern, made the first
// time.
func (q *fairQueue) consumer(ctx context.Context, tok string) (jetstream.Consumer, error) {
	q.mu.Lock()
	cons := q.consumers[tok]
	q.mu.Unlock()
	if cons != nil {
		return cons, nil
	}
	cfg := q.template
	cfg.Durable = "q" + strings.TrimPrefix(consumerName(q.pattern), "run") + "_" + tok
	cfg.Description = "toolbus jobs of " + q.pattern + " for one caller"
	cfg.FilterSubject = q.names.prefix + ".jobs.queue." + tok + "." + q.tail
	cfg.InactiveThreshold = consumerIdle
	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	cons, err := q.js.CreateOrUpdateConsumer(cctx, q.names.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("jobs: consumer of a caller's %s jobs: %w", q.pattern, err)
	}
	q.mu.Lock()
	q.consumers[tok] = cons
	q.mu.Unlock()
	return cons, nil
}

// scan lists the callers with jobs of the pattern in the stream, waiting
// or running, and puts each in the ring.
func (q *fairQueue) scan(ctx context.Context) {
	q.mu.Lock()
	q.lastScan = time.Now()
	q.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	info, err := q.stream.Info(sctx, jetstream.WithSubjectFilter(q.names.prefix+".jobs.queue.*."+q.tail))
	if err != nil {
		if ctx.Err() == nil { // not a shutdown
			q.log.Warn("list the callers with jobs", "pattern", q.pattern, "err", err)
		}
		return
	}
	// The caller's token follows the prefix's tokens, "jobs" and "queue".
	at := strings.Count(q.names.prefix, ".") + 3
	q.mu.Lock()
	defer q.mu.Unlock()
	for subject := range info.State.Subjects {
		tokens := strings.SplitN(subject, ".", at+2)
		if len(tokens) < at+2 {
			continue
		}
		if tok := tokens[at]; !slices.Contains(q.ring, tok) {
			q.ring = append(q.ring, tok)
		}
	}
}

// DefaultCallerMaxQueued is the most jobs one named caller may have queued
// or running (caller_max_queued_jobs).
const DefaultCallerMaxQueued = 10_000

// WithCallerMaxQueued bounds the jobs one named caller has queued or
// running (default [DefaultCallerMaxQueued]); a submit past it is refused
// -32006 naming caller_max_queued_jobs, while other callers' submits go on.
// The count is read from the stream at each submit, so submits racing each
// other may pass it by a few. The empty caller of an ingress without
// authentication has no bound of its own: its share is the whole queue
// ([WithMaxQueued]).
func WithCallerMaxQueued(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("jobs: caller max queued jobs must be at least 1, got %d", n)
		}
		c.callerMaxQueued = n
		return nil
	}
}

// admitQueued returns the refusal of a new job of a caller that has its
// bound of jobs queued or running, or nil.
func (s *Service) admitQueued(ctx context.Context, caller string) *schema.Error {
	if caller == "" {
		return nil
	}
	info, err := s.st.stream.Info(ctx, jetstream.WithSubjectFilter(s.st.names.queueCallerFilter(callerToken(caller))))
	if err != nil {
		return unavailable("count the caller's queued jobs", err)
	}
	var n int64
	for _, c := range info.State.Subjects {
		n += int64(c)
	}
	if n < s.cfg.callerMaxQueued {
		return nil
	}
	e := schema.LimitError("caller_max_queued_jobs", s.cfg.callerMaxQueued, n)
	e.Message += "; wait for some of this caller's jobs to run, or cancel them, before submitting more"
	return e.WithData(map[string]any{"limit": "caller_max_queued_jobs", "max": s.cfg.callerMaxQueued, "got": n,
		"retryable": true, "retry_after_ms": 1000})
}
