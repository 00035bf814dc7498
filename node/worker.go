package node

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

// Worker is a worker process on one NATS connection: a runtime serving
// its tools and its status service. It runs jobs as calls over the bus,
// which the job runner of an ingress sends it ([withJobs]); it needs no
// JetStream. Make it with [NewWorker], run it with [Worker.Start] and stop
// it with [Worker.Shutdown]; it never closes its connection.
// [worker.ProbeHandler] with [Worker.Ready] serves its probes and metrics
// over HTTP.
type Worker struct {
	// Runtime serves the tools.
	Runtime *worker.Runtime

	nc  *nats.Conn
	st  *bus.Startup
	cfg workerSettings
	// bridges serve the tools of servers of other protocols on the
	// runtime; probes, when not nil, serves its probes and metrics on
	// probesAddr ([NewWorkerFrom]).
	bridges    []bridge
	probes     *http.Server
	probesAddr string

	mu       sync.Mutex
	started  bool  // Start was called, or Shutdown
	stops    stops // run last first by Shutdown
	shutdown sync.Once
	stopErr  error
}

type workerSettings struct {
	common
}

// NewWorker makes a worker of rt, a runtime on nc with its tools
// registered and not started, whose background setups and readiness go
// through st. Nothing runs before [Worker.Start].
func NewWorker(nc *nats.Conn, rt *worker.Runtime, st *bus.Startup, opts ...WorkerOption) (*Worker, error) {
	if nc == nil || rt == nil || st == nil {
		return nil, errors.New("node: worker needs a NATS connection, a runtime and a startup")
	}
	cfg, err := newWorkerSettings(opts)
	if err != nil {
		return nil, err
	}
	return &Worker{Runtime: rt, nc: nc, st: st, cfg: cfg}, nil
}

// checkWorkerOptions reports the first of opts that [NewWorker] would
// refuse.
func checkWorkerOptions(opts ...WorkerOption) error {
	_, err := newWorkerSettings(opts)
	return err
}

// newWorkerSettings returns the settings opts make of the defaults, or
// the first refusal.
func newWorkerSettings(opts []WorkerOption) (workerSettings, error) {
	cfg := workerSettings{common: defaultCommon()}
	for _, o := range opts {
		if err := o.applyWorker(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Ready reports whether the worker serves calls: nil when its startup
// waits for nothing and the runtime is ready ([worker.Runtime.Ready]),
// otherwise why not. It suits [worker.ProbeHandler].
func (w *Worker) Ready() error {
	if err := w.st.Err(); err != nil {
		return err
	}
	return w.Runtime.Ready()
}

// Start starts the bridges, which register their servers' tools before
// the runtime subscribes, within ctx; then the probes, so that they say
// why the worker is not ready while it drains; then the runtime, which
// takes calls at once (its subscriptions reach the server when the
// connection is up), and answers `toolbus status` on the bus. When it
// fails, what it began is stopped again. It may be called once, and not
// after Shutdown.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("node: worker already started")
	}
	w.started = true
	fail := func(err error) error {
		stopAll(context.WithoutCancel(ctx), w.cfg.log, &w.stops)
		return err
	}
	keepHeapGoal(w.cfg.common, &w.stops)
	for _, b := range w.bridges {
		if err := b.Start(ctx); err != nil {
			return fail(err)
		}
		w.stops.add("bridge", func(context.Context) error { return b.Close() })
	}
	if w.probes != nil {
		l, err := listenProbes(w.probesAddr)
		if err != nil {
			return fail(err)
		}
		go func() {
			if err := w.probes.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				w.cfg.log.Error("worker metrics server stopped", "err", err)
			}
		}()
		w.cfg.log.Info("worker metrics and probes", "url", "http://"+l.Addr().String()+"/metrics")
		w.stops.add("probes server", w.probes.Shutdown)
	}
	if err := w.Runtime.Start(); err != nil {
		return fail(err)
	}
	// The runtime answers `toolbus status` itself (worker.WithoutStatus
	// turns it off), so that a worker built without node is listed too.
	w.stops.add("runtime (draining its calls)", w.Runtime.Shutdown)
	return nil
}

// Shutdown stops the worker: the status service stops, then the runtime
// drains: it takes no new calls and finishes those it holds; then the
// probes and the bridges stop. ctx bounds the waiting; past it the
// handlers' contexts are canceled. It does not close the NATS connection: drain it afterwards
// ([bus.Drain]). Calling Shutdown again returns the first call's error.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.shutdown.Do(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.started = true
		w.stopErr = stopAll(ctx, w.cfg.log, &w.stops)
	})
	return w.stopErr
}

// stopStep is the stop of one part of a process, named for the log.
type stopStep struct {
	name string
	stop func(ctx context.Context) error
}

// stops are the stops of a process's parts, run last first.
type stops []stopStep

// add adds the stop of the part name.
func (l *stops) add(name string, stop func(ctx context.Context) error) {
	*l = append(*l, stopStep{name: name, stop: stop})
}

// slowStopAfter is how long a part may take to stop before the shutdown
// says, once, which part it still waits for.
const slowStopAfter = 2 * time.Second

// stopAll runs the stops of *l in reverse order of their adding and
// forgets them. A part that takes longer than [slowStopAfter] is named
// in a warning, so that a shutdown that hangs says where.
func stopAll(ctx context.Context, log *slog.Logger, l *stops) error {
	return stopAllWarning(ctx, log, l, slowStopAfter)
}

// stopAllWarning is [stopAll] with the time after which a part is named.
func stopAllWarning(ctx context.Context, log *slog.Logger, l *stops, slowAfter time.Duration) error {
	var errs []error
	for i := len(*l) - 1; i >= 0; i-- {
		step := (*l)[i]
		began := time.Now()
		slow := time.AfterFunc(slowAfter, func() {
			log.Warn("shutdown: still waiting for a part to stop", "part", step.name, "waited", time.Since(began).Round(time.Millisecond).String())
		})
		errs = append(errs, step.stop(ctx))
		slow.Stop()
	}
	*l = nil
	return errors.Join(errs...)
}
