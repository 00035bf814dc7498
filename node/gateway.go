package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// Parts of a gateway's [bus.Startup].
const (
	partJobs        = "jobs"
	partRunner      = "job runner"
	partIdempotency = "idempotency store"
	partA2APush     = "A2A push notification configs"
	partTools       = "known tools"
)

// Gateway is an ingress process on one NATS connection: the aggregator
// and the HTTP server in front of it, and, as configured, the registry of
// announced tools, the jobs service and the idempotency store. Make it
// with [NewGateway], run it with [Gateway.Start] and stop it with
// [Gateway.Shutdown]; it never closes its connection.
type Gateway struct {
	// Aggregator and Ingress are the running parts, for callers that look
	// inside.
	Aggregator *aggregator.Aggregator
	Ingress    *ingress.Server
	// Registry is the registry of announced tools; nil without
	// [withRegistry].
	Registry *discovery.Registry
	// Runner runs the queued jobs, each as a call over the bus through an
	// aggregator of its own whose deadlines reach the jobs' longest run
	// time; nil without [withJobs].
	Runner *jobs.Runner

	nc   *nats.Conn
	st   *bus.Startup
	cfg  gatewaySettings
	jobs *lazyJobs                    // nil without [withJobs]
	idem *aggregator.IdempotencyStore // nil without [withIdempotency]
	push *a2a.PushStore               // nil without [withA2A]

	mu       sync.Mutex
	started  bool  // Start was called, or Shutdown
	stops    stops // run last first by Shutdown
	shutdown sync.Once
	stopErr  error
}

type gatewaySettings struct {
	common
	// aggOpts and ingOpts are what a config asks of the aggregator and
	// the ingress ([withParts], [WithAuth]), after the gateway's own.
	aggOpts   []aggregator.Option
	ingOpts   []ingress.Option
	authOff   bool
	registry  bool
	retention time.Duration
	validate  bool
	// jobs and a2a are the jobs service and runner and the A2A door, each
	// served when its On is set ([withJobs], [withA2A]); counters count
	// the jobs of both.
	jobs      JobsConfig
	a2a       A2AConfig
	counters  *jobs.Counters
	idem      bool
	idemTTL   time.Duration
	idemBytes int64
	replicas  int
	metrics   *prometheus.Registry
}

// withA2A serves the A2A front door at POST /a2a and its agent card
// ([ingress.WithA2A]), named after the cluster's prefix, as c says when
// c.On is set (start from the A2A of [DefaultGatewayConfig]). It needs
// [withJobs]: an A2A task is a job. Push notifications are on: their
// configs live in the JetStream bucket <prefix>_a2a_push (opened in the
// background, like the jobs service's stream), and reach loopback,
// private and link-local receivers only when the jobs' CallbackAllow
// admits them, as job callbacks do. Default: no A2A.
func withA2A(c A2AConfig) GatewayOption {
	return gatewayOption(func(s *gatewaySettings) error {
		s.a2a = c
		return nil
	})
}

// WithAuth authenticates the gateway's callers with a
// ([ingress.WithAuth]), in place of what a config's [AuthConfig] loads:
// for a program that holds its keys itself, such as a test. Default: no
// authentication, every caller reaches every tool.
func WithAuth(a auth.Config) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		c.ingOpts = append(c.ingOpts, ingress.WithAuth(a))
		c.authOff = false
		return nil
	})
}

// withParts builds the aggregator and the ingress with aggOpts and
// ingOpts after the gateway's own: [NewGatewayFrom] gives those its
// config makes; authOff says that it turns authentication off.
func withParts(aggOpts []aggregator.Option, ingOpts []ingress.Option, authOff bool) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		c.aggOpts = append(c.aggOpts, aggOpts...)
		c.ingOpts = append(c.ingOpts, ingOpts...)
		c.authOff = authOff
		return nil
	})
}

// withRegistry keeps a registry of the tools workers announce: the ingress
// validates params, answers -32003 for known methods without workers and
// serves rpc.discover, GET /openrpc.json and the MCP front door
// ([ingress.WithDiscovery]); a tool announced as idempotent may be
// published again, as [aggregator.WithRetrySafe] patterns are. With
// [withJobs] the registry keeps its known tools in the cluster's JetStream
// bucket of them (set up in the background, like the jobs stream, as the
// startup part "known tools"), and rpc.jobs.submit refuses a method no
// worker has announced within the retention ([withToolsRetention]) or
// params that break its schema. Default: no registry.
func withRegistry() GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		c.registry = true
		return nil
	})
}

// withToolsRetention sets how long the registry keeps a tool known after
// its last worker was seen (default [discovery.DefaultRetention]); with
// [withJobs] it is also how long the bucket of known tools keeps it.
func withToolsRetention(d time.Duration) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		if d < time.Minute {
			return fmt.Errorf("node: tools retention must be at least 1m, got %v", d)
		}
		c.retention = d
		return nil
	})
}

// withValidation turns the checking of params against the registry's
// schemas on or off (default on), for calls ([ingress.WithValidation])
// and job submits alike.
func withValidation(on bool) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		c.validate = on
		return nil
	})
}

// withJobs serves the rpc.jobs.* methods with a jobs service and runs
// the queued jobs with a job runner that sends each to a worker as a call
// over the bus, both as c says, when c.On is set (start from the Jobs of
// [DefaultGatewayConfig]). c.Replicas is not read: every JetStream store
// of the gateway has the replicas of [withReplicas]. The stream and
// bucket are opened in the background; until they are, the methods are
// refused -32003 with reason jobs_not_ready. Default: no jobs.
func withJobs(c JobsConfig) GatewayOption {
	return gatewayOption(func(s *gatewaySettings) error {
		if _, err := egress.New(egress.WithAllow(c.CallbackAllow...)); err != nil {
			return fmt.Errorf("node: callback allowlist: %w", err)
		}
		if err := c.Validate(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		s.jobs = c
		return nil
	})
}

// withJobCounters counts the jobs of the gateway's service and runner
// into c, counters the caller made (default: counters of the gateway's
// own, shared by both).
func withJobCounters(c *jobs.Counters) GatewayOption {
	return gatewayOption(func(s *gatewaySettings) error {
		if c == nil {
			return errors.New("node: nil job counters")
		}
		s.counters = c
		return nil
	})
}

// withIdempotency honours Idempotency-Key headers with records in a
// JetStream bucket kept ttl (zero: [aggregator.DefaultIdempotencyTTL]) of
// at most maxBytes (zero: [aggregator.DefaultIdempotencyMaxBytes]). The
// bucket is opened in the background; until it is, calls with a key are
// refused -32003. Default: keys are ignored.
func withIdempotency(ttl time.Duration, maxBytes int64) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		if ttl < 0 || maxBytes < 0 {
			return fmt.Errorf("node: idempotency ttl %v and max bytes %d must not be negative", ttl, maxBytes)
		}
		c.idem, c.idemTTL, c.idemBytes = true, ttl, maxBytes
		return nil
	})
}

// withReplicas sets the JetStream replicas of the jobs stream and bucket
// and of the idempotency bucket (default [jobs.DefaultReplicas]): 3 on a
// three-node cluster.
func withReplicas(n int) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("node: replicas must be 1 to 5, got %d", n)
		}
		c.replicas = n
		return nil
	})
}

// withMetrics serves the ingress's Prometheus metrics from reg
// ([ingress.WithMetrics]) and registers the jobs service's there once it
// is set up. Default: no metrics.
func withMetrics(reg *prometheus.Registry) GatewayOption {
	return gatewayOption(func(c *gatewaySettings) error {
		if reg == nil {
			return errors.New("node: nil metrics registry")
		}
		c.metrics = reg
		return nil
	})
}

// defaultGatewaySettings is what a gateway is made with before its
// options.
func defaultGatewaySettings() gatewaySettings {
	return gatewaySettings{common: defaultCommon(), replicas: jobs.DefaultReplicas, retention: discovery.DefaultRetention, validate: true}
}

// checkGatewayOptions reports the first of opts that [NewGateway] would
// refuse.
func checkGatewayOptions(opts ...GatewayOption) error {
	_, err := newGatewaySettings(opts)
	return err
}

// newGatewaySettings returns the settings opts make of the defaults, or
// the first refusal.
func newGatewaySettings(opts []GatewayOption) (gatewaySettings, error) {
	cfg := defaultGatewaySettings()
	for _, o := range opts {
		if err := o.applyGateway(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// NewGateway makes a gateway on nc whose background setups and readiness
// go through st; opts ([WithLogger], [WithAuth]) are applied in order.
// Its aggregator and ingress take their packages' defaults, with no jobs,
// discovery, idempotency or metrics; [NewGatewayFrom] builds a gateway
// from a config. Nothing runs before [Gateway.Start].
func NewGateway(nc *nats.Conn, st *bus.Startup, opts ...GatewayOption) (*Gateway, error) {
	if nc == nil || st == nil {
		return nil, errors.New("node: gateway needs a NATS connection and a startup")
	}
	// The service and the runner count into the same counters, the
	// gateway's own unless withJobCounters gives others.
	cfg, err := newGatewaySettings(opts)
	if err != nil {
		return nil, err
	}
	if cfg.counters == nil {
		cfg.counters = jobs.NewCounters()
	}
	if cfg.authOff {
		cfg.log.Warn("authentication is off: every caller reaches every tool")
	}
	g := &Gateway{nc: nc, st: st, cfg: cfg}

	aggOpts := []aggregator.Option{aggregator.WithSubjects(cfg.subjects), aggregator.WithLogger(cfg.log)}
	if cfg.idem {
		g.idem = &aggregator.IdempotencyStore{}
		aggOpts = append(aggOpts, aggregator.WithIdempotencyStore(g.idem))
	}
	if cfg.registry {
		reg, err := discovery.New(discovery.WithLogger(cfg.log), discovery.WithRetention(cfg.retention))
		if err != nil {
			return nil, err
		}
		g.Registry = reg
		aggOpts = append(aggOpts, aggregator.WithRetrySafeFunc(reg.RetrySafe))
	}
	// The workers answer under the call replies' subject, not the
	// connection's inbox: there a worker that reconnects through another
	// NATS node can still answer (PROTOCOL.md, revision 10).
	aggOpts = append(aggOpts, aggregator.WithReplyPrefix(cfg.subjects.Replies()))
	agg, err := aggregator.New(nc, append(aggOpts, cfg.aggOpts...)...)
	if err != nil {
		return nil, err
	}
	g.Aggregator = agg
	if cfg.metrics != nil {
		if err := cfg.metrics.Register(agg.Collector()); err != nil {
			return nil, fmt.Errorf("node: the aggregator's metrics: %w", err)
		}
	}
	if cfg.jobs.On {
		if g.Runner, err = newJobRunner(nc, cfg, g.Registry); err != nil {
			return nil, err
		}
	}

	subjects := cfg.subjects
	ingOpts := []ingress.Option{
		// Fairness is on unless an option of the caller's says otherwise.
		ingress.WithFairness(ingress.Fairness{}),
		// The aggregator's rule is the calls' deadline policy, which the
		// ingress settles for each call before its fairness layer queues
		// it.
		ingress.WithDeadline(agg.Timeout),
		ingress.WithLogger(cfg.log),
		ingress.WithOrigin(bus.Origin(nc, cfg.subjects.Prefix())),
		ingress.WithReadiness(func(context.Context) error { return g.Ready() }),
		ingress.WithStatusGather(func(ctx context.Context) ([]bus.Status, error) {
			return bus.GatherStatus(ctx, nc, subjects, dashboardGatherWait)
		}),
		ingress.WithNATSState(func(ctx context.Context) dashboard.NATSState { return natsState(ctx, nc) }),
	}
	if cfg.jobs.On {
		g.jobs = &lazyJobs{st: st, part: partJobs}
		ingOpts = append(ingOpts, ingress.WithExtension(schema.MethodJobsPrefix, g.jobs), ingress.WithJobStats(g.jobs.stats))
	}
	if g.Registry != nil {
		ingOpts = append(ingOpts, ingress.WithRegistry(g.Registry), ingress.WithValidation(cfg.validate))
	}
	if cfg.metrics != nil {
		ingOpts = append(ingOpts, ingress.WithMetrics(cfg.metrics))
	}
	if cfg.a2a.On {
		if !cfg.jobs.On {
			return nil, errors.New("node: the A2A front door runs tasks as jobs; turn jobs on with it")
		}
		guard, err := egress.New(egress.WithAllow(cfg.jobs.CallbackAllow...))
		if err != nil {
			return nil, err
		}
		g.push = &a2a.PushStore{}
		ingOpts = append(ingOpts, ingress.WithA2A(ingress.A2AConfig{Name: cfg.subjects.Prefix(), TextMethod: cfg.a2a.TextMethod,
			PublicSkills: cfg.a2a.PublicSkills, Push: g.push, Guard: guard,
			PushCallerMaxConfigs: cfg.a2a.PushCallerMaxConfigs, PushCallerMaxBytes: cfg.a2a.PushCallerMaxBytes}))
	}
	if g.Ingress, err = ingress.New(agg, append(ingOpts, cfg.ingOpts...)...); err != nil {
		return nil, err
	}
	return g, nil
}

// Ready reports whether the gateway serves calls: nil when its startup
// waits for nothing and its connection is up, otherwise one line saying
// why not. It is the ingress's /readyz.
func (g *Gateway) Ready() error {
	if err := g.st.Err(); err != nil {
		return err
	}
	if s := g.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("nats connection is %s", s)
	}
	return nil
}

// Jobs returns the jobs service once it is set up; nil before, and
// without [withJobs].
func (g *Gateway) Jobs() *jobs.Service {
	if g.jobs == nil {
		return nil
	}
	return g.jobs.svc.Load()
}

// Start begins the background setups of the idempotency store and the
// jobs service, follows the workers' announcements, answers `toolbus
// status` on the bus, and serves HTTP on l until [Gateway.Shutdown]. When
// it fails, what it began is stopped again. It may be called once, and
// not after Shutdown.
func (g *Gateway) Start(l net.Listener) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("node: gateway already started")
	}
	g.started = true
	fail := func(err error) error {
		stopAll(context.Background(), g.cfg.log, &g.stops)
		return err
	}
	keepHeapGoal(g.cfg.common, &g.stops)
	stopCheck := checkReplyGrant(g.st, g.nc, g.cfg.subjects)
	g.stops.add("reply subjects check", func(context.Context) error { stopCheck(); return nil })
	if g.idem != nil {
		stop := g.st.SetUp(partIdempotency, g.nc, g.cfg.replicas, g.openIdempotency)
		g.stops.add("idempotency setup", func(context.Context) error { stop(); return nil })
	}
	if g.Registry != nil {
		feed, err := bus.NewAnnouncements(g.nc, g.cfg.subjects)
		if err != nil {
			return fail(err)
		}
		if err := g.Registry.Start(feed); err != nil {
			return fail(err)
		}
		g.stops.add("tool registry", func(context.Context) error { g.Registry.Close(); return nil })
		// The known tools live in JetStream when the gateway needs it
		// anyway, for jobs, whose submits they judge; without jobs the
		// ingress runs on a NATS without JetStream, and knows what it
		// hears.
		if g.jobs != nil {
			stop := g.st.SetUp(partTools, g.nc, g.cfg.replicas, g.openTools)
			g.stops.add("known tools setup", func(context.Context) error { stop(); return nil })
		}
	}
	if g.push != nil {
		stop := g.st.SetUp(partA2APush, g.nc, g.cfg.replicas, g.openPush)
		g.stops.add("A2A push setup", func(context.Context) error { stop(); return nil })
	}
	if g.jobs != nil {
		stop := g.st.SetUp(partJobs, g.nc, g.cfg.replicas, g.openJobs)
		g.stops.add("jobs service", func(ctx context.Context) error {
			stop()
			if svc := g.jobs.svc.Load(); svc != nil {
				return svc.Shutdown(ctx)
			}
			return nil
		})
		stopRunner := g.st.SetUp(partRunner, g.nc, g.cfg.replicas, g.Runner.Start)
		g.stops.add("job runner", func(ctx context.Context) error {
			stopRunner()
			return g.Runner.Shutdown(ctx)
		})
		stopSampling := g.sampleJobsQueued(callstats.TrendStep)
		g.stops.add("jobs sampling", func(context.Context) error { stopSampling(); return nil })
	}
	svc, err := serveStatus(g.nc, g.cfg.subjects, bus.KindIngress, g.cfg.version, func() bus.Status { return ingressStatus(g.Ingress) })
	if err != nil {
		return fail(err)
	}
	g.stops.add("status service", func(context.Context) error { return svc.Stop() })
	served := make(chan error, 1)
	go func() {
		err := g.Ingress.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			g.cfg.log.Error("ingress stopped serving", "err", err)
		}
		served <- err
	}()
	g.stops.add("HTTP server (answering its calls in flight)", func(ctx context.Context) error {
		return errors.Join(g.Ingress.Shutdown(ctx), <-served)
	})
	return nil
}

// Shutdown stops the gateway: the HTTP server stops accepting and answers
// what is in flight, then the status service, the job runner (which waits
// for the jobs it runs until ctx ends, and then gives them back to the
// queue), the jobs service, the registry and the background setups stop,
// in that order. ctx bounds the
// waiting. It does not close the NATS connection: drain it afterwards
// ([bus.Drain]). Calling Shutdown again returns the first call's error.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.shutdown.Do(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.started = true
		g.stopErr = stopAll(ctx, g.cfg.log, &g.stops)
		if g.idem != nil {
			g.idem.Close()
		}
	})
	return g.stopErr
}

// openIdempotency is the setup of the idempotency store.
func (g *Gateway) openIdempotency(ctx context.Context) error {
	js, err := jetstream.New(g.nc)
	if err != nil {
		return err
	}
	kv, err := aggregator.IdempotencyBucket(ctx, js, g.cfg.subjects, g.cfg.idemTTL, g.cfg.replicas, g.cfg.idemBytes)
	if err != nil {
		g.idem.Waiting("JetStream: " + err.Error())
		return err
	}
	g.idem.Open(kv)
	return nil
}

// openPush is the setup of the A2A push notification configs.
func (g *Gateway) openPush(ctx context.Context) error {
	js, err := jetstream.New(g.nc)
	if err != nil {
		return err
	}
	kv, err := a2a.PushBucket(ctx, js, g.cfg.subjects, g.cfg.replicas, 0, 0)
	if err != nil {
		return err
	}
	g.push.Open(kv)
	return nil
}

// openTools is the setup of the bucket of known tools.
func (g *Gateway) openTools(ctx context.Context) error {
	js, err := jetstream.New(g.nc)
	if err != nil {
		return err
	}
	kv, err := discovery.ToolsBucket(ctx, js, g.cfg.subjects, g.cfg.retention, g.cfg.replicas, 0)
	if err != nil {
		return err
	}
	return g.Registry.Persist(ctx, kv)
}

// checkMethod is the jobs service's [jobs.MethodCheck]: the registry's
// judgement, except that a method it does not know may still be in the
// bucket of known tools while that is not read yet.
func (g *Gateway) checkMethod(_ context.Context, method string, params json.RawMessage) (string, *schema.Error) {
	waiting, e := g.Registry.Check(method, params, g.cfg.validate)
	if e != nil && e.Reason() == schema.ReasonUnknownMethod {
		if r := g.st.Reason(partTools); r != "" {
			return "", schema.NewError(schema.CodeUnavailable,
				"jobs are not available yet: the known tools are not read yet ("+r+"); send the call again shortly",
				map[string]any{"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonJobsNotReady})
		}
	}
	return waiting, e
}

// openJobs is the setup of the jobs service.
func (g *Gateway) openJobs(ctx context.Context) error {
	js, err := jetstream.New(g.nc)
	if err != nil {
		return err
	}
	// A caller may submit as a job only a method it may call.
	opts := append([]jobs.Option{jobs.WithSubjects(g.cfg.subjects), jobs.WithLogger(g.cfg.log), jobs.WithReplicas(g.cfg.replicas),
		jobs.WithCounters(g.cfg.counters), jobs.WithAuthorize(ingress.Allowed)}, g.cfg.jobs.serviceOptions()...)
	if g.Registry != nil {
		// A submit that cannot run is refused at once.
		opts = append(opts, jobs.WithMethodCheck(g.checkMethod))
	}
	svc, err := jobs.Open(ctx, js, opts...)
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	if g.cfg.metrics != nil {
		if err := g.cfg.metrics.Register(svc.Collector()); err != nil {
			g.cfg.log.Error("jobs metrics not served", "err", err)
		}
	}
	g.jobs.svc.Store(svc)
	return nil
}

// newJobRunner returns the job runner of a gateway: it sends each job as
// a call over the bus, through an aggregator of its own whose deadlines
// reach the jobs' longest run time and whose reply subjects are under
// [bus.Subjects.JobReplies], with the gateway's aggregator options
// (liveness, retry-safe tools) otherwise.
func newJobRunner(nc *nats.Conn, cfg gatewaySettings, reg *discovery.Registry) (*jobs.Runner, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	d := &lateDispatcher{}
	inv := jobs.NewBusInvoker(d, func(method string) bool { return d.agg.RetrySafe(method) })
	ropts := append([]jobs.RunnerOption{jobs.WithRunnerSubjects(cfg.subjects), jobs.WithRunnerLogger(cfg.log),
		jobs.WithRunnerReplicas(cfg.replicas), jobs.WithRunnerCounters(cfg.counters)}, cfg.jobs.runnerOptions()...)
	runner, err := jobs.NewRunner(js, inv, ropts...)
	if err != nil {
		return nil, err
	}
	aggOpts := []aggregator.Option{aggregator.WithSubjects(cfg.subjects), aggregator.WithLogger(cfg.log)}
	if reg != nil {
		aggOpts = append(aggOpts, aggregator.WithRetrySafeFunc(reg.RetrySafe))
	}
	aggOpts = append(append(aggOpts, cfg.aggOpts...),
		aggregator.WithDefaultTimeout(runner.MaxRunTime()), aggregator.WithMaxTimeout(runner.MaxRunTime()),
		aggregator.WithReplyPrefix(cfg.subjects.JobReplies()))
	if d.agg, err = aggregator.New(nc, aggOpts...); err != nil {
		return nil, fmt.Errorf("node: the job runner's aggregator: %w", err)
	}
	if cfg.metrics != nil {
		if err := cfg.metrics.Register(d.agg.Collector()); err != nil {
			return nil, fmt.Errorf("node: the job runner's aggregator metrics: %w", err)
		}
	}
	return runner, nil
}

// lateDispatcher is the aggregator of a job runner, set once the runner
// has said how long its jobs may run.
type lateDispatcher struct{ agg *aggregator.Aggregator }

func (d *lateDispatcher) Dispatch(ctx context.Context, calls []schema.Call, emit func(int, schema.Response)) {
	d.agg.Dispatch(ctx, calls, emit)
}

// ingressStatus is the status answer of an ingress.
func ingressStatus(srv *ingress.Server) bus.Status {
	st := srv.Overview()
	tr := srv.Trends()
	return bus.Status{Kind: bus.KindIngress, ID: st.Ingress.ID, Started: st.Ingress.Started, InFlight: st.Ingress.InFlight,
		RecentErrors: srv.RecentErrors(),
		Methods:      st.Methods, Trends: &tr, Extra: map[string]any{"discovery": st.Discovery, "workers": len(st.Workers)}}
}

// serveStatus answers `toolbus status` for one part of the process.
func serveStatus(nc *nats.Conn, subjects bus.Subjects, kind, version string, snapshot func() bus.Status) (micro.Service, error) {
	svc, err := bus.ServeStatus(nc, subjects, kind, version, snapshot)
	if err != nil {
		return nil, fmt.Errorf("%s: status service: %w", kind, err)
	}
	return svc, nil
}

// sampleJobsQueued records the depth of the jobs queue in the ingress's
// trends every interval, so that the dashboard's chart of it has a
// history whether or not anyone was watching. It returns what stops it.
func (g *Gateway) sampleJobsQueued(interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			svc := g.jobs.svc.Load()
			if svc == nil {
				continue
			}
			sctx, scancel := context.WithTimeout(ctx, interval)
			st, err := svc.Stats(sctx, 0)
			scancel()
			if err == nil {
				g.Ingress.RecordJobsQueued(int64(st.ByState[schema.JobQueued]))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
