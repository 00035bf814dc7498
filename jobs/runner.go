package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// Invoker runs tools for a [Runner]: a [BusInvoker] sends each job to a
// worker as a call over the bus. It is declared here, with schema and
// standard types only, so that jobs need not import what runs the tools.
type Invoker interface {
	// Invoke runs the tool of call.Method once with call.Params; ctx ends
	// when the job is canceled, its runner stops, or it runs too long.
	// progress receives what the tool reports. It returns a result of
	// valid JSON, or an error: a *schema.Error fails the job with it; a
	// *[WaitError] says that nothing ran, and the job waits in the queue;
	// a *[InterruptedError] says that the run was cut off and may have
	// done part of its work, and the job runs again only when its method
	// is retry-safe. Any other error fails the job as an internal error.
	Invoke(ctx context.Context, call schema.Call, progress func(percent float64, message string)) (json.RawMessage, error)
	// Methods returns the method names and patterns ("math.*") served.
	Methods() []string
	// RetrySafe reports whether method is safe to run again after an
	// interrupted run.
	RetrySafe(method string) bool
}

// WaitError is the error of an [Invoker] when nothing of the job ran: no
// worker serves the method now, every worker was busy, the bus was down.
// The job stays queued, the run does not count as an attempt, and the
// job's record says why it waits ([schema.JobRecord] Waiting) until it
// runs.
type WaitError struct {
	// Reason is the record's Waiting value, such as
	// [schema.ReasonNoWorkers].
	Reason string
	// Err is the answer that said so.
	Err *schema.Error
}

func (e *WaitError) Error() string {
	return "jobs: the job did not run (" + e.Reason + "): " + e.Err.Error()
}

func (e *WaitError) Unwrap() error { return e.Err }

// InterruptedError is the error of an [Invoker] when the run was cut off
// after it started, such as by the loss of its worker: it may have done
// part of its work. The job runs again when its method is retry-safe and
// attempts remain, and otherwise fails as interrupted.
type InterruptedError struct {
	// Err is the answer that said so.
	Err *schema.Error
}

func (e *InterruptedError) Error() string {
	return "jobs: the run was interrupted: " + e.Err.Error()
}

func (e *InterruptedError) Unwrap() error { return e.Err }

// Defaults of a [Runner].
const (
	DefaultLease          = 30 * time.Second
	DefaultRunConcurrency = 16
	DefaultMaxDeliver     = 10
	// DefaultProgressInterval is as often as a worker sends progress
	// (worker.ProgressInterval), so that a job's record follows its tool
	// within about that time, and is written at most ten times a second.
	DefaultProgressInterval = 100 * time.Millisecond
	DefaultMaxRunTime       = time.Hour
	DefaultFetchWait        = 5 * time.Second
	// DefaultWaitBackoff and DefaultMaxWaitBackoff bound how long a job
	// that did not run for want of a worker waits before it is offered
	// again: the first wait, doubled at each delivery up to the second.
	DefaultWaitBackoff    = 250 * time.Millisecond
	DefaultMaxWaitBackoff = 5 * time.Second
)

type runnerConfig struct {
	subjects         bus.Subjects
	logger           *slog.Logger
	store            storeConfig
	lease            time.Duration
	concurrency      int
	maxDeliver       int
	progressInterval time.Duration
	maxRunTime       time.Duration
	fetchWait        time.Duration
	waitBackoff      time.Duration
	maxWaitBackoff   time.Duration
	counters         *Counters
}

// RunnerOption configures [NewRunner].
type RunnerOption func(*runnerConfig) error

// WithRunnerSubjects sets the cluster's subjects (default
// [bus.DefaultSubjects]); they must be the services'. The zero value is
// refused.
func WithRunnerSubjects(s bus.Subjects) RunnerOption {
	return func(c *runnerConfig) error {
		if s.IsZero() {
			return errZeroSubjects
		}
		c.subjects = s
		return nil
	}
}

// WithRunnerLogger sets the logger (default slog.Default()).
func WithRunnerLogger(l *slog.Logger) RunnerOption {
	return func(c *runnerConfig) error {
		if l == nil {
			return errors.New("jobs: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithRunnerReplicas sets the replica count the runner creates the stream
// and bucket with when no service has created them yet (default
// [DefaultReplicas]); it never changes existing ones.
func WithRunnerReplicas(n int) RunnerOption {
	return func(c *runnerConfig) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("jobs: replicas must be 1 to 5, got %d", n)
		}
		c.store.replicas = n
		return nil
	}
}

// WithLease sets how long a runner holds a job without renewing its claim
// (the consumer's AckWait; default [DefaultLease]). The runner renews it at
// a third of the lease while the tool runs; a runner that dies mid-job
// loses the job to another after at most one lease.
func WithLease(d time.Duration) RunnerOption {
	return func(c *runnerConfig) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("jobs: lease must be at least 100ms, got %v", d)
		}
		c.lease = d
		return nil
	}
}

// WithRunConcurrency sets how many jobs of one served pattern run at once
// in this runner (default [DefaultRunConcurrency]).
func WithRunConcurrency(n int) RunnerOption {
	return func(c *runnerConfig) error {
		if n < 1 {
			return fmt.Errorf("jobs: run concurrency must be at least 1, got %d", n)
		}
		c.concurrency = n
		return nil
	}
}

// WithMaxDeliver sets how often JetStream delivers one queued job at most
// (default [DefaultMaxDeliver]). Runs are bounded by each job's
// max_attempts; this bounds deliveries that end without a run too (a
// runner stopping, the bucket unreachable), so that no job circulates for
// ever. It must be above the services' max attempts.
func WithMaxDeliver(n int) RunnerOption {
	return func(c *runnerConfig) error {
		if n < 2 {
			return fmt.Errorf("jobs: max deliver must be at least 2, got %d", n)
		}
		c.maxDeliver = n
		return nil
	}
}

// WithProgressInterval sets how often at most a job's progress is written
// to its record (default [DefaultProgressInterval]): the first report is
// written at once, and the newest of those that come within an interval
// when it ends, so the record lags the tool by at most one interval.
func WithProgressInterval(d time.Duration) RunnerOption {
	return func(c *runnerConfig) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("jobs: progress interval must be at least 10ms, got %v", d)
		}
		c.progressInterval = d
		return nil
	}
}

// WithMaxRunTime bounds one run of a job (default [DefaultMaxRunTime]); a
// run past it is canceled and the job fails with -32001.
func WithMaxRunTime(d time.Duration) RunnerOption {
	return func(c *runnerConfig) error {
		if d <= 0 {
			return fmt.Errorf("jobs: max run time must be positive, got %v", d)
		}
		c.maxRunTime = d
		return nil
	}
}

// WithFetchWait sets how long one fetch waits for jobs (default
// [DefaultFetchWait]).
func WithFetchWait(d time.Duration) RunnerOption {
	return func(c *runnerConfig) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("jobs: fetch wait must be at least 100ms, got %v", d)
		}
		c.fetchWait = d
		return nil
	}
}

// WithWaitBackoff sets how long a job that did not run for want of a
// worker ([WaitError]) waits before it is offered again: first, doubled at
// each delivery up to most (defaults [DefaultWaitBackoff] and
// [DefaultMaxWaitBackoff]).
func WithWaitBackoff(first, most time.Duration) RunnerOption {
	return func(c *runnerConfig) error {
		if first < time.Millisecond || most < first {
			return fmt.Errorf("jobs: wait backoff must be at least 1ms and at most its maximum, got %v and %v", first, most)
		}
		c.waitBackoff, c.maxWaitBackoff = first, most
		return nil
	}
}

// Causes of a run's context ending other than the tool's own deadline.
var (
	errJobCanceled = errors.New("jobs: the job was canceled")
	errLeaseLost   = errors.New("jobs: the runner lost the job's lease")
	errShutdown    = errors.New("jobs: the runner is shutting down")
)

// Runner runs queued jobs with the tools of an [Invoker]. Make one with
// [NewRunner], then [Runner.Start] and, when done, [Runner.Shutdown]. Every
// runner serving a pattern shares one durable consumer of it, so a job runs
// on one of them.
//
// Patterns served as jobs must not overlap across the cluster (one runner
// serving "math.*" and another "math.add"): JetStream refuses overlapping
// consumers on a work-queue stream, and Start reports it.
type Runner struct {
	js  jetstream.JetStream
	inv Invoker
	cfg runnerConfig
	log *slog.Logger

	// ctx is the parent of every run's context, canceled only when
	// Shutdown runs out of time; it spans the runner's life, not a job.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	st        *store
	started   bool
	closed    bool
	running   map[string]context.CancelCauseFunc
	cancelSub *nats.Subscription
	readySubs []*nats.Subscription
	queues    []*fairQueue
	names     names
	// follows follows the records of jobs that wait for an answer; nil
	// until the first question.
	follows *hub

	stop  chan struct{}
	loops sync.WaitGroup // fetch loops
	jobs  sync.WaitGroup // runs
}

// defaultRunnerConfig is a runner's configuration before its options.
func defaultRunnerConfig() runnerConfig {
	return runnerConfig{
		subjects:         bus.DefaultSubjects(),
		logger:           slog.Default(),
		store:            defaultStoreConfig(),
		lease:            DefaultLease,
		concurrency:      DefaultRunConcurrency,
		maxDeliver:       DefaultMaxDeliver,
		progressInterval: DefaultProgressInterval,
		maxRunTime:       DefaultMaxRunTime,
		fetchWait:        DefaultFetchWait,
		waitBackoff:      DefaultWaitBackoff,
		maxWaitBackoff:   DefaultMaxWaitBackoff,
	}
}

// CheckRunnerOptions applies opts as [NewRunner] would and returns the
// first error, so that settings can be checked before anything connects.
func CheckRunnerOptions(opts ...RunnerOption) error {
	cfg := defaultRunnerConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	return nil
}

// NewRunner returns a runner of inv's tools on js. The caller owns js and
// its connection.
func NewRunner(js jetstream.JetStream, inv Invoker, opts ...RunnerOption) (*Runner, error) {
	if js == nil || inv == nil {
		return nil, errors.New("jobs: NewRunner needs a JetStream and an Invoker")
	}
	cfg := defaultRunnerConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.counters == nil {
		cfg.counters = NewCounters()
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Runner{
		js: js, inv: inv, cfg: cfg, log: cfg.logger.With("component", "jobs-runner"),
		ctx: ctx, cancel: cancel,
		running: map[string]context.CancelCauseFunc{},
		stop:    make(chan struct{}),
	}, nil
}

// MaxRunTime returns the longest a run of a job may take
// ([WithMaxRunTime]).
func (r *Runner) MaxRunTime() time.Duration { return r.cfg.maxRunTime }

// served is what a runner takes the jobs of one served pattern from.
type served struct {
	pattern string
	// legacy is the pattern's consumer of the subjects jobs were queued on
	// before they were queued per caller: it takes the jobs left there,
	// and its filter tells services which methods run as jobs.
	legacy jetstream.Consumer
	// queue hands out the jobs queued per caller, in turn.
	queue *fairQueue
}

// setUp opens the store and creates the consumers of every served pattern.
func (r *Runner) setUp(ctx context.Context, n names) ([]served, error) {
	st, err := openStore(ctx, r.js, n, r.cfg.store, false)
	if err != nil {
		return nil, err
	}
	r.st = st
	var out []served
	for _, pattern := range r.inv.Methods() {
		filter, err := n.runFilter(pattern)
		if err != nil {
			return nil, fmt.Errorf("jobs: serve %q: %w", pattern, err)
		}
		template := jetstream.ConsumerConfig{
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       r.cfg.lease,
			MaxDeliver:    r.cfg.maxDeliver,
			MaxAckPending: 10_000,
		}
		cfg := template
		cfg.Durable = consumerName(pattern)
		cfg.Description = "toolbus jobs of " + pattern
		cfg.FilterSubject = filter
		cons, err := r.js.CreateOrUpdateConsumer(ctx, n.stream, cfg)
		if err != nil {
			if wqNotUnique(err) {
				return nil, fmt.Errorf("jobs: the stream %s has a consumer whose jobs overlap %q: a job runner of an earlier version, "+
					"when workers ran jobs, made it; once every worker runs this version, list the stream's consumers with "+
					"`nats consumer ls %s` and remove the run_… ones with `nats consumer rm %s <name>`: %w",
					n.stream, pattern, n.stream, n.stream, err)
			}
			return nil, fmt.Errorf("jobs: consumer for %q: %w", pattern, err)
		}
		q, err := newFairQueue(r.js, st.stream, n, pattern, template, r.cfg.fetchWait, r.log)
		if err != nil {
			return nil, fmt.Errorf("jobs: serve %q: %w", pattern, err)
		}
		out = append(out, served{pattern: pattern, legacy: cons, queue: q})
	}
	return out, nil
}

// consumerName is the durable consumer of pattern: readable, and unique
// because of the hash, as consumer names cannot hold '.', '*' or '>'.
func consumerName(pattern string) string {
	sum := sha256.Sum256([]byte(pattern))
	readable := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, pattern)
	if len(readable) > 48 {
		readable = readable[:48]
	}
	return "run_" + readable + "_" + hex.EncodeToString(sum[:4])
}

// Start creates (or updates) a durable consumer for every method the
// invoker serves and begins fetching jobs. ctx bounds the setup only. It
// fails on the first error of setting up and may then be called again: a
// process that starts before JetStream is up retries it (see [bus.Retry]
// and [bus.JetStreamError]).
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("jobs: runner is shut down")
	}
	if r.started {
		return errors.New("jobs: runner already started")
	}
	n := newNames(r.cfg.subjects)
	for _, pattern := range r.inv.Methods() {
		if _, err := n.runFilter(pattern); err != nil {
			return fmt.Errorf("jobs: serve %q: %w", pattern, err)
		}
	}
	patterns, err := r.setUp(ctx, n)
	if err != nil {
		return err
	}
	r.names = n
	for _, p := range patterns {
		r.queues = append(r.queues, p.queue)
	}
	// One subscription per served pattern, so that a worker whose
	// credential covers only its own methods may hear their rings.
	ring := func(m *nats.Msg) {
		tok, method, ok := strings.Cut(strings.TrimPrefix(m.Subject, n.prefix+".jobs.ready."), ".")
		if !ok {
			return
		}
		for _, p := range patterns {
			if p.queue.serves(method) {
				p.queue.wake(tok)
			}
		}
	}
	for _, pattern := range r.inv.Methods() {
		tail, err := n.patternTail(pattern)
		if err != nil {
			return fmt.Errorf("jobs: serve %q: %w", pattern, err)
		}
		ready, err := r.js.Conn().Subscribe(n.prefix+".jobs.ready.*."+tail, ring)
		if err != nil {
			for _, s := range r.readySubs {
				_ = s.Unsubscribe()
			}
			r.readySubs = nil
			return fmt.Errorf("jobs: subscribe to queued jobs: %w", err)
		}
		r.readySubs = append(r.readySubs, ready)
	}
	sub, err := r.js.Conn().Subscribe(n.cancelWildcard(), func(m *nats.Msg) {
		id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		r.mu.Lock()
		cancel := r.running[id]
		r.mu.Unlock()
		if cancel != nil {
			cancel(errJobCanceled)
		}
	})
	if err != nil {
		return fmt.Errorf("jobs: subscribe to cancels: %w", err)
	}
	r.cancelSub = sub
	for _, p := range patterns {
		run := func(sem chan struct{}) func(jetstream.Msg) {
			return func(msg jetstream.Msg) {
				r.jobs.Add(1)
				go func() {
					defer r.jobs.Done()
					defer func() { <-sem }()
					r.handle(msg)
				}()
			}
		}
		sem := make(chan struct{}, r.cfg.concurrency)
		r.loops.Add(1)
		go func() {
			defer r.loops.Done()
			fairLoop(r.ctx, r.stop, p.queue, sem, run(sem))
		}()
		// Jobs queued by an older version wait on the legacy subjects
		// until a runner takes them; only then is a loop spent on them.
		if info, err := p.legacy.Info(ctx); err != nil || info.NumPending+uint64(info.NumAckPending) > 0 {
			r.loops.Add(1)
			go func() {
				defer r.loops.Done()
				legacy := make(chan struct{}, r.cfg.concurrency)
				fetchLoop(r.ctx, r.stop, p.legacy, legacy, r.cfg.fetchWait, r.log, run(legacy))
			}()
		}
	}
	r.started = true
	return nil
}

// fairLoop hands the jobs of q to run, one free slot of sem at a time,
// until stop is closed.
func fairLoop(ctx context.Context, stop <-chan struct{}, q *fairQueue, sem chan struct{}, run func(jetstream.Msg)) {
	// A listing of the stream or a consumer's creation in progress ends
	// as soon as stop is closed: with NATS unreachable each would
	// otherwise wait out its own timeout (30 s) and hold up the runner's
	// shutdown. A fetch without waiting takes no context and ends by
	// itself within about a second.
	ctx, cancel := untilClosed(ctx, stop)
	defer cancel()
	for {
		select {
		case sem <- struct{}{}:
		case <-stop:
			return
		}
		msg := q.next(ctx, stop)
		if msg == nil {
			<-sem
			return
		}
		select {
		case <-stop:
			_ = msg.Nak() // another runner takes it now
			<-sem
			return
		default:
		}
		run(msg)
	}
}

// Shutdown stops the runner: it fetches no more jobs and waits for the
// running ones to finish. When ctx ends first it cancels them and returns
// an error wrapping ctx.Err(); their jobs are given back to the queue and
// run again (or fail, when not safe to retry) on another runner. It does
// not close the connection.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
		if r.cancelSub != nil {
			// Cancels still reach running jobs through the lease renewal,
			// which reads the record.
			_ = r.cancelSub.Unsubscribe()
		}
		for _, sub := range r.readySubs {
			_ = sub.Unsubscribe()
		}
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		// The loops end soon (stop ends what they wait on); the jobs
		// they started are waited for after them, as a loop may start one
		// until it ends.
		r.loops.Wait()
		r.jobs.Wait()
		close(done)
	}()
	closeFollows := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.follows != nil {
			r.follows.close()
		}
	}
	select {
	case <-done:
		r.cancel(errShutdown)
		closeFollows()
		return nil
	case <-ctx.Done():
		r.cancel(errShutdown)
		closeFollows()
		return fmt.Errorf("jobs: runner shutdown: jobs still running: %w", ctx.Err())
	}
}

// handle decides what one delivery of a queued job means and acts on it.
func (r *Runner) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		r.log.Error("job message without metadata", "err", err)
		_ = msg.Term()
		return
	}
	var job stored
	if err := json.Unmarshal(msg.Data(), &job); err != nil || !validID(job.ID) {
		r.log.Error("undecodable job message", "seq", meta.Sequence.Stream, "err", err)
		_ = msg.TermWithReason("undecodable job")
		return
	}
	ctx := r.ctx
	seq := meta.Sequence.Stream
	rec, _, err := r.st.get(ctx, job.ID)
	if errors.Is(err, errNotFound) {
		// The submitter queued the job but stopped before writing the
		// record: the message has all of it.
		job.State = schema.JobQueued
		if _, err = r.st.create(ctx, &job); err == nil || errors.Is(err, jetstream.ErrKeyExists) {
			rec, _, err = r.st.get(ctx, job.ID)
		}
	}
	if err != nil {
		r.log.Warn("read a job", "id", job.ID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	switch {
	case rec.State.Final():
		// Done already (its acknowledgement was lost) or canceled while
		// queued: finish what may be left, and drop the message.
		r.st.finished(ctx, rec, r.log)
		_ = msg.Ack()
		return
	case rec.State.Started() && rec.RunSeq != seq:
		r.log.Info("dropped a duplicate job message", "id", rec.ID, "seq", seq)
		_ = msg.Ack()
		return
	case rec.State.Started() && !r.inv.RetrySafe(rec.Method):
		r.fail(ctx, msg, rec, seq, schema.ReasonInterruptedNotRetryable,
			"the job's worker was interrupted while it ran, and "+rec.Method+" is not safe to run twice")
		return
	case rec.State.Started() && rec.Attempts >= rec.MaxAttempts:
		r.fail(ctx, msg, rec, seq, schema.ReasonAttemptsExhausted,
			fmt.Sprintf("the job was interrupted on each of its %d attempts", rec.Attempts))
		return
	}
	r.run(ctx, msg, rec.ID, seq)
}

// fail ends an interrupted job without running it again.
func (r *Runner) fail(ctx context.Context, msg jetstream.Msg, rec *stored, seq uint64, reason, detail string) {
	attempts := rec.Attempts
	rpcErr := schema.NewError(schema.CodeToolError, "tool error: "+detail,
		map[string]any{"reason": reason, "attempts": attempts, "retryable": false})
	r.log.Warn("job failed without running again", "id", rec.ID, "method", rec.Method, "reason", reason)
	r.finish(ctx, msg, rec.ID, seq, attempts, nil, rpcErr)
}

// run runs the job once and writes its outcome.
func (r *Runner) run(ctx context.Context, msg jetstream.Msg, id string, seq uint64) {
	rec, err := r.st.update(ctx, id, func(j *stored) error {
		if j.State.Final() || (j.State.Started() && j.RunSeq != seq) {
			return errSkip
		}
		now := time.Now().UTC()
		j.State, j.RunSeq, j.StartedAt, j.Waiting = schema.JobRunning, seq, &now, ""
		j.Question, j.Answer = nil, nil
		j.Attempts++
		return nil
	})
	if errors.Is(err, errSkip) {
		_ = msg.Ack()
		return
	}
	if err != nil {
		r.log.Warn("set a job running", "id", id, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	attempt := rec.Attempts

	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, tcancel := context.WithTimeout(jctx, r.cfg.maxRunTime)
	defer tcancel()
	r.mu.Lock()
	r.running[id] = cancel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.running, id)
		r.mu.Unlock()
	}()

	sup := &supervisor{r: r, msg: msg, id: id, seq: seq, attempt: attempt, cancel: cancel,
		dirty: make(chan struct{}, 1), newQuestion: make(chan struct{}, 1), done: make(chan struct{})}
	supDone := make(chan struct{})
	go func() { defer close(supDone); sup.loop(tctx) }()

	call := schema.Call{
		Request:     schema.Request{ID: json.RawMessage(strconv.Quote(id)), Method: rec.Method, Params: rec.Params},
		Caller:      rec.Caller,
		TraceParent: rec.TraceParent,
	}
	if !rec.CannotAsk {
		call.Ask = sup.ask
	}
	result, err := r.inv.Invoke(tctx, call, sup.report)
	// The invoker's own timer for the deadline may fire before the
	// context's: the run timed out when its deadline has passed, whether
	// or not tctx says so yet.
	deadline, _ := tctx.Deadline()
	timedOut := tctx.Err() != nil || !time.Now().Before(deadline)
	close(sup.done)
	<-supDone
	if sup.askedOnce {
		// Whatever ends the run, the question leaves the record before
		// the job is given back or finished: its worker no longer waits
		// for the answer.
		sup.withdraw(ctx)
	}

	var wait *WaitError
	var interrupted *InterruptedError
	switch cause := context.Cause(jctx); {
	case errors.Is(cause, errShutdown), errors.Is(cause, errLeaseLost):
		// Another runner gets the job; it decides from the record whether
		// to run it again.
		r.log.Info("job interrupted", "id", id, "cause", cause)
		_ = msg.Nak()
		return
	case timedOut:
	case errors.As(err, &wait):
		r.requeue(ctx, msg, id, seq, attempt, wait)
		return
	case errors.As(err, &interrupted):
		// Delivered again at once, the job meets the rule of an
		// interrupted run in handle: again when retry-safe, else failed.
		r.log.Info("job interrupted", "id", id, "method", rec.Method, "err", interrupted.Err.Message)
		_ = msg.Nak()
		r.wakeAfter(msg.Subject(), 0)
		return
	}
	rpcErr := invokeError(err)
	switch cause := context.Cause(jctx); {
	case errors.Is(cause, errJobCanceled):
		rpcErr, result = canceledError(), nil
	case timedOut && sup.waiting():
		rpcErr, result = schema.NewError(schema.CodeTimeout, fmt.Sprintf("timed out: the job's tool waited for the answer to its question "+
			"longer than the job may run (%v); answer a job's question with %s while the job is %s", r.cfg.maxRunTime, schema.MethodJobsAnswer, schema.JobInputRequired),
			map[string]any{"reason": schema.ReasonQuestionUnanswered, "retryable": false}), nil
	case timedOut && rpcErr != nil && rpcErr.Code != schema.CodeTimeout:
		rpcErr = schema.NewError(schema.CodeTimeout, fmt.Sprintf("timed out: the job ran longer than %v", r.cfg.maxRunTime),
			map[string]any{"reason": schema.ReasonMaxRunTime, "retryable": false})
	}
	r.finish(ctx, msg, id, seq, attempt, result, rpcErr, sup.last())
}

// invokeError is the error a job fails with for what an [Invoker]
// returned.
func invokeError(err error) *schema.Error {
	var rpcErr *schema.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rpcErr):
		return rpcErr
	}
	return schema.NewError(schema.CodeInternal, "internal error: "+err.Error(), nil)
}

// requeue gives a job that did not run back to the queue: its record
// becomes queued again, without the attempt, and says why it waits; its
// message comes back after a wait that grows with its deliveries. Near
// the consumer's bound of deliveries the job is queued afresh, so that
// waiting for a worker never uses them up.
func (r *Runner) requeue(ctx context.Context, msg jetstream.Msg, id string, seq uint64, attempt int, wait *WaitError) {
	_, err := r.st.update(ctx, id, func(j *stored) error {
		if !j.State.Started() || j.RunSeq != seq || j.Attempts != attempt {
			return errSkip
		}
		j.State, j.StartedAt, j.Waiting = schema.JobQueued, nil, wait.Reason
		j.Attempts--
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		r.log.Warn("record that a job waits", "id", id, "err", err)
	}
	delivered := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	r.log.Debug("job waits", "id", id, "reason", wait.Reason, "deliveries", delivered)
	if int(delivered) >= r.cfg.maxDeliver-1 {
		again := &nats.Msg{Subject: msg.Subject(), Data: msg.Data()}
		_, err := r.js.PublishMsg(ctx, again, jetstream.WithMsgID(id+"."+strconv.FormatUint(seq, 10)))
		if err == nil {
			_ = msg.Ack()
			r.wakeAfter(msg.Subject(), r.waitBackoff(delivered))
			return
		}
		r.log.Warn("queue a waiting job afresh", "id", id, "err", err)
	}
	d := r.waitBackoff(delivered)
	_ = msg.NakWithDelay(d)
	r.wakeAfter(msg.Subject(), d)
}

// wakeAfter asks, after d, for the next job of the caller whose queue
// subject is subject: a job given back to the queue is then taken as soon
// as it is due, rather than at the next listing of the stream.
func (r *Runner) wakeAfter(subject string, d time.Duration) {
	rest, queued := strings.CutPrefix(subject, r.names.prefix+".jobs.queue.")
	tok, method, ok := strings.Cut(rest, ".")
	if !queued || !ok {
		return // a legacy subject: its loop fetches on its own
	}
	wake := func() {
		for _, q := range r.queues {
			if q.serves(method) {
				q.wake(tok)
			}
		}
	}
	// The server takes an acknowledgement on its own time: a little
	// later, the message is surely back.
	time.AfterFunc(d+d/2+wakeSlack, wake)
}

// wakeSlack is how long after a message is due back a runner asks for it.
const wakeSlack = 10 * time.Millisecond

// waitBackoff is how long a job that did not run waits after its
// delivered'th delivery.
func (r *Runner) waitBackoff(delivered uint64) time.Duration {
	d := r.cfg.waitBackoff
	for i := uint64(1); i < delivered && d < r.cfg.maxWaitBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.maxWaitBackoff)
}

// finishWrites bounds the attempts at writing a job's outcome.
const finishWrites = 5

// finish writes a run's outcome to the record, unless the record says the
// job was canceled meanwhile or another delivery has taken it over, then
// acknowledges the message. A write that keeps failing leaves the message
// unacknowledged, so it comes back after the lease.
func (r *Runner) finish(ctx context.Context, msg jetstream.Msg, id string, seq uint64, attempt int,
	result json.RawMessage, rpcErr *schema.Error, progress ...*schema.JobProgress) {
	var rec *stored
	var err error
	fenced := false
	for i := range finishWrites {
		if i > 0 {
			_ = msg.InProgress()
			if !ctxwait.Sleep(ctx, time.Duration(i)*200*time.Millisecond) {
				break // the runner stops: the message comes back after the lease
			}
		}
		rec, err = r.st.update(ctx, id, func(j *stored) error {
			if j.State == schema.JobCanceled {
				return errSkip
			}
			if !j.State.Started() || j.RunSeq != seq || j.Attempts != attempt {
				fenced = true
				return errSkip
			}
			now := time.Now().UTC()
			if len(progress) > 0 && progress[0] != nil {
				j.progress(progress[0], now)
			}
			if rpcErr != nil {
				j.finish(schema.JobFailed, nil, rpcErr, now)
			} else {
				j.finish(schema.JobSucceeded, result, nil, now)
			}
			// The oldest messages of the history give their room to
			// the result before the result is refused.
			if limit := r.maxRecordBytes(); !j.fit(limit) && rpcErr == nil {
				b, _ := json.Marshal(j)
				room := limit - int64(len(b)-len(result))
				j.finish(schema.JobFailed, nil, schema.LimitError("max_result_bytes", max(room, 0), int64(len(result))), *j.FinishedAt)
			}
			return nil
		})
		if err == nil || errors.Is(err, errSkip) || errors.Is(err, errNotFound) {
			break
		}
		r.log.Warn("write a job's outcome", "id", id, "try", i+1, "err", err)
	}
	switch {
	case fenced:
		// Another delivery of this message owns the job now; its runner
		// acknowledges it.
		r.log.Info("job taken over by another run", "id", id)
	case errors.Is(err, errSkip), errors.Is(err, errNotFound):
		_ = msg.Ack()
	case err != nil:
		r.log.Error("lost a job's outcome", "id", id, "err", err)
	default:
		r.cfg.counters.addFinished(rec.Method, rec.State)
		r.st.finished(ctx, rec, r.log)
		_ = msg.Ack()
	}
}

// maxRecordBytes is the largest record the bucket can take on this
// connection's server.
func (r *Runner) maxRecordBytes() int64 {
	mp := r.js.Conn().MaxPayload()
	if mp <= 0 {
		mp = 1 << 20
	}
	return mp - 4<<10
}

// supervisor keeps a running job's lease, notices a cancel written to its
// record, and writes its progress at most once per interval.
type supervisor struct {
	r       *Runner
	msg     jetstream.Msg
	id      string
	seq     uint64
	attempt int
	cancel  context.CancelCauseFunc

	mu       sync.Mutex
	progress *schema.JobProgress
	written  *schema.JobProgress
	dirty    chan struct{}
	done     chan struct{}

	// Questions (rule 11): pending is the newest question the call's
	// callback handed over and the loop has not taken (guarded by mu),
	// newQuestion signals it. The loop alone uses cur, the question the job
	// waits on, follow, the follow of its record while it waits, and
	// replied, the latest answer published, to publish again when the
	// worker asks the same question again. askedOnce is set by the loop
	// when it takes a question; run reads it and cur after the loop ended.
	pending     *asking
	newQuestion chan struct{}
	cur         *asking
	follow      *follower
	replied     *schema.Answer
	askedOnce   bool
}

// asking is a question of the job's tool and the function that answers
// it.
type asking struct {
	q      schema.Question
	answer func(schema.Answer) error
}

// report is the progress callback handed to the tool.
func (s *supervisor) report(percent float64, message string) {
	s.mu.Lock()
	// Two decimals are all a person reads; a tool computing its share
	// (50.00369402) would otherwise show every digit.
	s.progress = &schema.JobProgress{Percent: math.Round(percent*100) / 100, Message: message}
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *supervisor) last() *schema.JobProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress
}

func (s *supervisor) loop(ctx context.Context) {
	renew := time.NewTicker(s.r.cfg.lease / 3)
	defer renew.Stop()
	var throttle <-chan time.Time
	pending := false
	defer s.unfollow()
	for {
		var records <-chan *stored
		if s.follow != nil {
			records = s.follow.records()
		}
		select {
		case <-s.done:
			return
		case <-s.newQuestion:
			s.takeQuestion(ctx)
		case rec, ok := <-records:
			if !ok {
				// Ended early (the watch is gone): the lease renewal
				// still reads the record.
				s.unfollow()
				continue
			}
			s.sawRecord(ctx, rec)
		case <-renew.C:
			s.renew(ctx)
		case <-s.dirty:
			if throttle == nil {
				s.writeProgress(ctx)
				throttle = time.After(s.r.cfg.progressInterval)
			} else {
				pending = true
			}
		case <-throttle:
			throttle = nil
			if pending {
				pending = false
				s.writeProgress(ctx)
				throttle = time.After(s.r.cfg.progressInterval)
			}
		}
	}
}

// renew extends the lease and reads the record: a cancel or a takeover
// ends the run even when the cancel message was missed.
func (s *supervisor) renew(ctx context.Context) {
	if err := s.msg.InProgress(); errors.Is(err, nats.ErrConnectionClosed) {
		s.cancel(errLeaseLost)
		return
	}
	rec, _, err := s.r.st.get(ctx, s.id)
	switch {
	case err != nil:
		return // keep running: the bucket may be back at the next renewal
	case rec.State == schema.JobCanceled:
		s.cancel(errJobCanceled)
	case !rec.State.Started() || rec.RunSeq != s.seq || rec.Attempts != s.attempt:
		s.cancel(errLeaseLost)
	default:
		// The record is read anyway: an answer the watch missed is
		// taken here.
		s.sawRecord(ctx, rec)
	}
}

func (s *supervisor) writeProgress(ctx context.Context) {
	p := s.last()
	if p == nil || p == s.written {
		return
	}
	_, err := s.r.st.update(ctx, s.id, func(j *stored) error {
		if !j.State.Started() || j.RunSeq != s.seq || j.Attempts != s.attempt {
			return errSkip
		}
		j.progress(p, time.Now().UTC())
		j.fit(s.r.maxRecordBytes())
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		s.r.log.Warn("write a job's progress", "id", s.id, "err", err)
		return
	}
	s.written = p
}

// wqNotUnique reports whether err is JetStream's refusal of a consumer
// whose filter overlaps another consumer's on a work-queue stream.
func wqNotUnique(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeOverlappingFilterSubjects || apiErr.ErrorCode == 10100
}

// ask is the call's question callback (schema.Call's Ask): it hands the
// question to the loop and returns at once.
func (s *supervisor) ask(q schema.Question, answer func(schema.Answer) error) {
	s.mu.Lock()
	s.pending = &asking{q: q, answer: answer}
	s.mu.Unlock()
	select {
	case s.newQuestion <- struct{}{}:
	default:
	}
}

// takeQuestion records a new question on the job's record, which becomes
// input_required, and follows the record for the answer; the same
// question asked again is answered again when it was answered already.
func (s *supervisor) takeQuestion(ctx context.Context) {
	s.mu.Lock()
	a := s.pending
	s.pending = nil
	s.mu.Unlock()
	switch {
	case a == nil:
		return
	case s.replied != nil && s.replied.ID == a.q.ID:
		// The worker did not get the answer: publish it again.
		if err := a.answer(*s.replied); err != nil {
			s.r.log.Warn("answer a job's question again", "id", s.id, "err", err)
		}
		return
	case s.cur != nil && s.cur.q.ID == a.q.ID:
		s.cur = a
		return
	}
	s.cur, s.askedOnce = a, true
	_, err := s.r.st.update(ctx, s.id, func(j *stored) error {
		if !j.State.Started() || j.RunSeq != s.seq || j.Attempts != s.attempt {
			return errSkip
		}
		now := time.Now().UTC()
		j.State, j.Answer = schema.JobInputRequired, nil
		j.Question = &schema.JobQuestion{ID: a.q.ID, Message: a.q.Message, Schema: a.q.Schema, AskedAt: now}
		j.say(a.q.Message, map[string]any{"question": a.q.ID}, now)
		j.fit(s.r.maxRecordBytes())
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		// Without the question on the record nobody can answer: the
		// job runs to its deadline, failing as question_unanswered.
		s.r.log.Warn("record a job's question", "id", s.id, "err", err)
		return
	}
	if s.follow == nil {
		f, err := s.r.hub().follow(ctx, s.id)
		if err != nil {
			s.r.log.Warn("follow a job for its answer", "id", s.id, "err", err)
			return // the lease renewal reads the record for it
		}
		s.follow = f
	}
}

// sawRecord publishes the answer a record of the job carries for the
// question the job waits on, then clears it from the record.
func (s *supervisor) sawRecord(ctx context.Context, rec *stored) {
	if s.cur == nil || rec.Answer == nil || rec.Answer.ID != s.cur.q.ID || rec.RunSeq != s.seq || rec.Attempts != s.attempt {
		return
	}
	a := *rec.Answer
	if err := s.cur.answer(a); err != nil {
		s.r.log.Warn("answer a job's question", "id", s.id, "err", err)
	}
	s.replied, s.cur = &a, nil
	s.unfollow()
	_, err := s.r.st.update(ctx, s.id, func(j *stored) error {
		if j.Answer == nil || j.Answer.ID != a.ID || j.RunSeq != s.seq || j.Attempts != s.attempt {
			return errSkip
		}
		j.Answer = nil
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		s.r.log.Warn("clear a job's answer", "id", s.id, "err", err)
	}
}

func (s *supervisor) unfollow() {
	if s.follow != nil {
		s.follow.stop()
		s.follow = nil
	}
}

// waiting reports, once the loop has ended, whether the job's tool was
// waiting for the answer to a question.
func (s *supervisor) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil || s.pending != nil
}

// withdraw takes the question of an ended run off the job's record: a job
// that waited for an answer and was interrupted is running again, without
// it, until it runs again or fails.
func (s *supervisor) withdraw(ctx context.Context) {
	_, err := s.r.st.update(ctx, s.id, func(j *stored) error {
		if j.State != schema.JobInputRequired && j.Question == nil && j.Answer == nil {
			return errSkip
		}
		if !j.State.Started() || j.RunSeq != s.seq || j.Attempts != s.attempt {
			return errSkip
		}
		j.State, j.Question, j.Answer = schema.JobRunning, nil, nil
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		s.r.log.Warn("withdraw a job's question", "id", s.id, "err", err)
	}
}

// hub returns the runner's follow of job records, made at the first
// question: the runners's jobs that wait for an answer share its watch.
func (r *Runner) hub() *hub {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.follows == nil {
		r.follows = newHub(r.st, r.log)
	}
	return r.follows
}
