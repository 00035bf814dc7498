package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// Startup tracks what a process still waits for before it is ready (NATS,
// JetStream's streams and buckets) and the first condition that will not
// pass, which should stop the process. Parts of a cluster may start in any
// order: an ingress or worker that starts before NATS, or while a
// JetStream cluster elects its leader, serves its probes, says on /readyz
// what it waits for ([Startup.Err]), and becomes ready by itself.
//
// A part is a name such as "nats (toolbus-ingress)" or "jobs"; it waits
// from [Startup.Wait] until [Startup.Done]. The process is ready the first
// time nothing is waited for after [Startup.Begin], which the process
// calls once every part has said what it waits for.
//
// Its methods are safe for concurrent use. Background setups
// ([Startup.SetUp]) run under its own context, which [Startup.Stop] ends.
type Startup struct {
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

// NewStartup returns a tracker that waits for nothing yet and logs what
// its setups meet to log.
func NewStartup(log *slog.Logger) *Startup {
	ctx, cancel := context.WithCancel(context.Background())
	return &Startup{
		log:     log,
		waiting: map[string]string{},
		ready:   make(chan struct{}),
		fatal:   make(chan error, 1),
		ctx:     ctx,
		cancel:  cancel,
	}
}

// Wait records that part is not ready and why.
func (s *Startup) Wait(part, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.waiting[part]; !ok {
		s.parts = append(s.parts, part)
	}
	s.waiting[part] = reason
}

// Done records that part is ready.
func (s *Startup) Done(part string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, part)
	s.parts = removeString(s.parts, part)
	s.checkReady()
}

// Begin is called once the process has started, when every part has said
// what it waits for: the process may be ready only from then on, as a
// part done early (NATS connected) says nothing of those not begun yet.
func (s *Startup) Begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begun = true
	s.checkReady()
}

// checkReady closes ready the first time nothing is waited for after
// Begin. s.mu must be held.
func (s *Startup) checkReady() {
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

// Ready is closed the first time nothing is waited for after
// [Startup.Begin]. A part may wait again later ([Startup.Err] says so);
// Ready stays closed.
func (s *Startup) Ready() <-chan struct{} { return s.ready }

// Fatal delivers the first condition that will not pass, once: the
// process should stop with it.
func (s *Startup) Fatal() <-chan error { return s.fatal }

// Fail records err, a condition that will not pass. Only the first
// failure is kept.
func (s *Startup) Fail(err error) {
	select {
	case s.fatal <- err:
	default:
	}
}

// Err returns nil when nothing is waited for, or one line naming what is:
// "starting: …" until the process has been ready once, "not ready: …"
// after.
func (s *Startup) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parts) == 0 {
		return nil
	}
	reasons := make([]string, len(s.parts))
	for i, p := range s.parts {
		reasons[i] = p + ": " + s.waiting[p]
	}
	state := "starting: "
	if s.isReady {
		state = "not ready: "
	}
	return errors.New(state + strings.Join(reasons, "; "))
}

// Reason returns what part waits for, or "" when it waits for nothing.
func (s *Startup) Reason(part string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[part]
}

// Stop ends the background setups and waits for them.
func (s *Startup) Stop() {
	s.cancel()
	s.wg.Wait()
}

// WatchConn returns the status function ([WithStatusFunc]) of the
// connection called name to url: it keeps part "nats (name)" waiting until
// the connection is up, with the reason of the latest failure while it is
// not, and fails when, before the connection was ever up, the server
// refuses the credentials, TLS fails or the server is too old. Once the
// connection has been up, no failure ends the process: a server that
// refuses the credentials later (NATS restarted with another token) keeps
// the part waiting, with the refusal as its reason, while the connection
// tries again with backoff (see the package documentation).
func (s *Startup) WatchConn(name, url string) func(*nats.Conn, error) {
	part := "nats (" + name + ")"
	s.Wait(part, "connecting to "+RedactURL(url))
	var up atomic.Bool
	return func(nc *nats.Conn, err error) {
		if err == nil {
			err = CheckServer(nc, false)
		}
		switch {
		case err == nil:
			up.Store(true)
			if s.Reason(part) != "" {
				s.log.Info("nats connected", "connection", name, "server", nc.ConnectedUrlRedacted(), "version", nc.ConnectedServerVersion())
			}
			s.Done(part)
		case Permanent(err) && !up.Load():
			s.Fail(err)
		default:
			s.Wait(part, "not connected to NATS at "+RedactURL(url)+": "+err.Error())
		}
	}
}

// errNotConnected is what a JetStream setup meets while its connection is
// down; it passes.
var errNotConnected = errors.New("not connected to NATS")

// SetUp runs setup in the background until it succeeds ([Retry], with the
// errors classified by [JetStreamError]), keeping part waiting meanwhile
// with the reason of the last failure; replicas is what setup asks of
// JetStream. A permanent failure is recorded with [Startup.Fail]. The
// returned function ends the setup if it still runs and waits for it:
// call it before closing what setup uses.
func (s *Startup) SetUp(part string, nc *nats.Conn, replicas int, setup func(ctx context.Context) error) (stop func()) {
	s.Wait(part, "waiting for JetStream")
	ctx, cancel := context.WithCancel(s.ctx)
	finished := make(chan struct{})
	s.wg.Go(func() {
		defer close(finished)
		err := Retry(ctx, RetryConfig{Report: func(err error) {
			s.Wait(part, "waiting for JetStream: "+err.Error())
			// While NATS is down its own part says so.
			if !errors.Is(err, errNotConnected) {
				s.log.Warn("waiting for JetStream", "part", part, "err", err)
			}
		}}, func(ctx context.Context) error {
			if !nc.IsConnected() {
				return errNotConnected
			}
			return JetStreamError(nc, replicas, setup(ctx))
		})
		switch {
		case err == nil:
			s.Done(part)
		case ctx.Err() != nil:
		default:
			s.Fail(fmt.Errorf("%s: %w", part, err))
		}
	})
	return func() {
		cancel()
		<-finished
	}
}
