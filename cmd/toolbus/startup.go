package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// startup tracks what a process still waits for before it is ready (NATS,
// JetStream's streams and buckets) and the first condition that will not
// pass, which stops the process. Parts of a cluster may start in any
// order: an ingress or worker that starts before NATS, or while a
// JetStream cluster elects its leader, serves its probes, says on /readyz
// what it waits for, and becomes ready by itself.
//
// Its methods are safe for concurrent use. Background setups run under
// its own context, which stop ends.
type startup struct {
	log *slog.Logger

	mu      sync.Mutex
	waiting map[string]string // part → what it waits for
	parts   []string          // in the order they began to wait
	ready   chan struct{}     // closed the first time nothing is waited for once begun
	begun   bool              // every part has said what it waits for
	isReady bool
	fatal   chan error // the first permanent failure

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newStartup(log *slog.Logger) *startup {
	ctx, cancel := context.WithCancel(context.Background())
	return &startup{
		log:     log,
		waiting: map[string]string{},
		ready:   make(chan struct{}),
		fatal:   make(chan error, 1),
		ctx:     ctx,
		cancel:  cancel,
	}
}

// wait records that part is not ready and why.
func (s *startup) wait(part, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.waiting[part]; !ok {
		s.parts = append(s.parts, part)
	}
	s.waiting[part] = reason
}

// done records that part is ready.
func (s *startup) done(part string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, part)
	s.parts = removeString(s.parts, part)
	s.checkReady()
}

// begin is called once the application has started, when every part has
// said what it waits for: the process may be ready only from then on, as a
// part done early (NATS connected) says nothing of those not begun yet.
func (s *startup) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begun = true
	s.checkReady()
}

// checkReady closes ready the first time nothing is waited for after
// begin. s.mu must be held.
func (s *startup) checkReady() {
	if s.begun && len(s.waiting) == 0 && !s.isReady {
		s.isReady = true
		close(s.ready)
	}
}

func removeString(list []string, v string) []string {
	out := list[:0]
	for _, x := range list {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// fail stops the process with err, a condition that will not pass. Only
// the first failure is kept.
func (s *startup) fail(err error) {
	select {
	case s.fatal <- err:
	default:
	}
}

// err returns nil when nothing is waited for, or one line naming what is.
func (s *startup) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) == 0 {
		return nil
	}
	reasons := make([]string, len(s.parts))
	for i, p := range s.parts {
		reasons[i] = p + ": " + s.waiting[p]
	}
	return errors.New("starting: " + strings.Join(reasons, "; "))
}

// reason returns what part waits for, or "" when it waits for nothing.
func (s *startup) reason(part string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[part]
}

// stop ends the background setups and waits for them.
func (s *startup) stop() {
	s.cancel()
	s.wg.Wait()
}

// watchConn returns the status function of the connection called name: it
// keeps part "nats (name)" waiting until the connection is up, and fails
// the process when the server refuses the credentials, TLS fails or the
// server is too old.
func (s *startup) watchConn(name, url string) func(*nats.Conn, error) {
	part := "nats (" + name + ")"
	s.wait(part, "connecting to "+bus.RedactURL(url))
	return func(nc *nats.Conn, err error) {
		if err == nil {
			err = bus.CheckServer(nc, false)
		}
		switch {
		case err == nil:
			if s.reason(part) != "" {
				s.log.Info("nats connected", "connection", name, "server", nc.ConnectedUrlRedacted(), "version", nc.ConnectedServerVersion())
			}
			s.done(part)
		case bus.Permanent(err):
			s.fail(explain(err))
		default:
			s.wait(part, "not connected to NATS at "+bus.RedactURL(url)+": "+err.Error())
		}
	}
}

// errNotConnected is what a JetStream setup meets while its connection is
// down; it passes.
var errNotConnected = errors.New("not connected to NATS")

// setUp runs setup in the background until it succeeds, keeping part
// waiting meanwhile with the reason of the last failure; replicas is what
// setup asks of JetStream. A permanent failure stops the process. The
// returned function ends the setup if it still runs and waits for it:
// call it before closing what setup uses.
func (s *startup) setUp(part string, nc *nats.Conn, replicas int, setup func(ctx context.Context) error) (stop func()) {
	s.wait(part, "waiting for JetStream")
	ctx, cancel := context.WithCancel(s.ctx)
	finished := make(chan struct{})
	s.wg.Go(func() {
		defer close(finished)
		err := bus.Retry(ctx, bus.RetryConfig{Report: func(err error) {
			s.wait(part, "waiting for JetStream: "+err.Error())
			// While NATS is down its own part says so.
			if !errors.Is(err, errNotConnected) {
				s.log.Warn("waiting for JetStream", "part", part, "err", err)
			}
		}}, func(ctx context.Context) error {
			if !nc.IsConnected() {
				return errNotConnected
			}
			return bus.JetStreamError(nc, replicas, setup(ctx))
		})
		switch {
		case err == nil:
			s.done(part)
		case ctx.Err() != nil:
		default:
			s.fail(explain(fmt.Errorf("%s: %w", part, err)))
		}
	})
	return func() {
		cancel()
		<-finished
	}
}

// explain adds to a permanent failure what to do about it, naming the
// flags that fix it.
func explain(err error) error {
	var fix string
	switch {
	case errors.Is(err, bus.ErrCredentials):
		fix = "give the right --nats-user and --nats-password, --nats-token, --nats-nkey or --nats-creds (or credentials in the --nats URL)"
	case errors.Is(err, bus.ErrTLS):
		fix = "check --nats-tls-ca, --nats-tls-cert and --nats-tls-key, and that the --nats URL names a host in the server's certificate"
	case errors.Is(err, bus.ErrServerTooOld):
		fix = "upgrade the server, or run `toolbus nats`, which contains a recent one"
	case errors.Is(err, bus.ErrNoJetStream):
		fix = "turn JetStream on in the server (nats-server -js; `toolbus nats` has it on), or run without it: --jobs=false, and --idempotency=false on an ingress"
	case errors.Is(err, bus.ErrReplicas):
		fix = "give --job-replicas no more than the NATS servers in the cluster (1 for a single server)"
	case errors.Is(err, bus.ErrJetStreamConfig):
		fix = "check --job-replicas, --job-ttl and --idempotency-ttl against the server's JetStream limits"
	default:
		return err
	}
	return fmt.Errorf("%w; %s", err, fix)
}

// lazyJobs serves the rpc.jobs.* methods through a jobs service once its
// stream and bucket are open, and refuses them -32003 (retryable, naming
// what it waits for) until then.
type lazyJobs struct {
	svc  atomic.Pointer[jobs.Service]
	st   *startup
	part string
}

func (l *lazyJobs) unavailable() *schema.Error {
	msg := "jobs are not available yet; send the call again shortly"
	if r := l.st.reason(l.part); r != "" {
		msg = "jobs are not available yet (" + r + "); send the call again shortly"
	}
	return schema.NewError(schema.CodeUnavailable, msg, map[string]any{
		"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonJobsNotReady})
}

func (l *lazyJobs) ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.ServeRPC(ctx, call)
	}
	return nil, l.unavailable()
}

func (l *lazyJobs) Promotable(ctx context.Context, method string) bool {
	svc := l.svc.Load()
	return svc != nil && svc.Promotable(ctx, method)
}

func (l *lazyJobs) RunAsJob(ctx context.Context, call schema.Call, timeout time.Duration) (json.RawMessage, *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.RunAsJob(ctx, call, timeout)
	}
	return nil, l.unavailable()
}

func (l *lazyJobs) Subscribe(ctx context.Context, call schema.Call) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	if svc := l.svc.Load(); svc != nil {
		return svc.Subscribe(ctx, call)
	}
	return nil, nil, l.unavailable()
}

// startReady starts app and waits until st has nothing left to wait for,
// for the commands that use the cluster as soon as it runs; on failure app
// is stopped again.
func startReady(ctx context.Context, app *fx.App, st *startup) error {
	if err := app.Start(ctx); err != nil {
		return st.cause(err)
	}
	st.begin()
	var err error
	select {
	case <-st.ready:
		return nil
	case err = <-st.fatal:
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = app.Stop(context.WithoutCancel(ctx)) // the failure to start is what matters
	return err
}

// cause returns why the application failed to start with err: the
// permanent condition st met, if any (a start step that failed because of
// it, such as one on a connection closed after its credentials were
// refused, says less), or else err as [startError] gives it. s may be nil
// when the application could not even be built.
func (s *startup) cause(err error) error {
	if s != nil {
		select {
		case fatal := <-s.fatal:
			return fatal
		default:
		}
	}
	return startError(err)
}

// startError turns an error of building or starting the application into
// the one line a person reads: the cause, without the dependency
// injection's account of which constructor failed where.
func startError(err error) error {
	if err == nil {
		return nil
	}
	return dig.RootCause(err)
}
