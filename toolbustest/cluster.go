package toolbustest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	// URL is the JSON-RPC endpoint of the ingress, http://127.0.0.1:PORT/rpc.
	URL string
	// BaseURL is the ingress's root, for /healthz and /readyz.
	BaseURL string
	// NATS is the embedded server.
	NATS *bus.Embedded
	// Aggregator and Ingress are the running parts, for tests that look
	// inside.
	Aggregator *aggregator.Aggregator
	Ingress    *ingress.Server
	// Worker is the cluster's first worker (nil with [WithoutWorker]).
	Worker *Worker

	// Jobs is the first ingress's jobs service (nil without [WithJobs]).
	Jobs *jobs.Service
	// Registry is the first ingress's registry (nil without
	// [WithDiscovery]).
	Registry *discovery.Registry

	client *http.Client
	opts   options
	// ingresses and workers are every part started, for the registries
	// to hear of the workers before a test goes on.
	ingresses []*Ingress
	workers   []*Worker
}

// Worker is one worker runtime with its own NATS connection. It runs jobs
// as calls over the bus, from the job runners of the ingresses.
type Worker struct {
	Runtime *worker.Runtime
	Conn    *nats.Conn
}

// Kill closes the worker's NATS connection at once, without draining, as a
// crashed process would: calls it holds are never answered.
func (w *Worker) Kill() { w.Conn.Close() }

type options struct {
	register   []func(*worker.Runtime) error
	noWorker   bool
	gateway    []func(*node.GatewayConfig)
	auth       *auth.Config
	tracer     trace.TracerProvider
	workerOpts []worker.Option
	logger     *slog.Logger
	jobs       bool
	idem       bool
	idemTTL    time.Duration
	discovery  bool
	a2a        bool
	metrics    *prometheus.Registry
	listen     bool
}

// Option configures [Start].
type Option func(*options)

// WithTools registers tools on the first worker in place of the demo
// toolset. It may be given more than once.
func WithTools(register func(rt *worker.Runtime) error) Option {
	return func(o *options) { o.register = append(o.register, register) }
}

// WithoutWorker starts no worker; add them with [Cluster.AddWorker].
func WithoutWorker() Option { return func(o *options) { o.noWorker = true } }

// WithGateway changes the config every ingress of the cluster is built
// from ([node.NewGatewayFrom]): its limits, deadlines, liveness, caps,
// fairness, jobs and A2A door. It may be given more than once; the
// changes apply in order.
// The config starts as [node.DefaultGatewayConfig] with authentication
// off and no jobs, idempotency, discovery, A2A or metrics, which the
// cluster's own options turn on.
func WithGateway(change func(c *node.GatewayConfig)) Option {
	return func(o *options) { o.gateway = append(o.gateway, change) }
}

// WithAuth has every ingress authenticate its callers with a
// ([node.WithAuth]). Default: authentication off.
func WithAuth(a auth.Config) Option { return func(o *options) { o.auth = &a } }

// WithTracerProvider has every ingress make its spans with tp (default
// the global provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// WithWorkerTracerProvider has every worker make its spans with tp
// (default the global provider).
func WithWorkerTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.workerOpts = append(o.workerOpts, worker.WithTracerProvider(tp)) }
}

// WithWorkerMetrics has every worker register its metrics on reg, as
// `toolbus dev` puts its worker's beside its ingress's (default none).
func WithWorkerMetrics(reg prometheus.Registerer) Option {
	return func(o *options) { o.workerOpts = append(o.workerOpts, worker.WithMetrics(reg)) }
}

// WithJobs turns on durable jobs: every ingress serves rpc.jobs.* and
// runs a job runner, which sends each job to a worker as a call over the
// bus, both as the Jobs of the cluster's config say ([WithGateway]).
func WithJobs() Option { return func(o *options) { o.jobs = true } }

// WithIdempotency gives every ingress of the cluster the same JetStream
// bucket of idempotency records, kept ttl (zero:
// [aggregator.DefaultIdempotencyTTL]), so that an Idempotency-Key header
// collapses duplicates across ingress replicas.
func WithIdempotency(ttl time.Duration) Option {
	return func(o *options) { o.idem, o.idemTTL = true, ttl }
}

// DiscoveryInterval is how often the workers of a cluster started
// [WithDiscovery] announce their tools: short, so that a test sees a
// vanished worker's tools go within a few seconds (three missed
// intervals), and long enough that a worker kept from the CPU for a
// moment on a loaded machine is not forgotten: at 200 ms, a worker
// silent for 600 ms under the race detector and other tests lost its
// tools in the middle of a test.
const DiscoveryInterval = time.Second

// WithDiscovery turns discovery on: every worker announces its tools
// (every [DiscoveryInterval]) and every ingress keeps a registry of them,
// validates params, serves rpc.discover, GET /openrpc.json and the MCP
// front door at /mcp ([ingress.WithDiscovery]).
func WithDiscovery() Option { return func(o *options) { o.discovery = true } }

// WithA2A serves the A2A front door on every ingress as the A2A of the
// cluster's config says ([WithGateway]). It needs [WithJobs]. Push
// notifications reach a receiver of the test when the config's
// Jobs.CallbackAllow admits it (such as "127.0.0.1").
func WithA2A() Option { return func(o *options) { o.a2a = true } }

// WithMetrics registers the metrics of the cluster's first ingress, its
// jobs service's included, with reg ([node.WithMetrics]), and serves them
// at its /metrics. Further ingresses register none: a registry takes each
// metric name once.
func WithMetrics(reg *prometheus.Registry) Option { return func(o *options) { o.metrics = reg } }

// WithNATSListener has the embedded NATS server listen on a free loopback
// port, closed by a generated token, so that a test can join a worker in
// another process, or one that connects as a program would
// ([Cluster.NATS]: ClientURL and Token).
func WithNATSListener() Option { return func(o *options) { o.listen = true } }

// WithLogger sets the logger of every part (default: one that discards).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Demo registers the demo toolset; it is what [Start] serves by default.
func Demo(rt *worker.Runtime) error { return demo.Register(rt) }

// Start starts a cluster and stops it when the test ends. It fails the test
// if any part does not start.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := options{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.register) == 0 {
		o.register = []func(*worker.Runtime) error{Demo}
	}
	var ecfg bus.EmbeddedConfig
	if o.listen {
		ecfg.Listen = "127.0.0.1:0"
	}
	e, err := bus.StartEmbedded(ecfg)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(e.Shutdown)
	o.workerOpts = append([]worker.Option{worker.WithLogger(o.logger)}, o.workerOpts...)
	if o.discovery {
		o.workerOpts = append(o.workerOpts, worker.WithAnnounce(DiscoveryInterval))
	} else {
		o.workerOpts = append(o.workerOpts, worker.WithoutAnnounce())
	}
	c := &Cluster{NATS: e, opts: o}
	if !o.noWorker {
		c.Worker = c.AddWorker(t, o.register...)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil}
	c.client = &http.Client{Transport: transport, Timeout: 5 * time.Minute}
	t.Cleanup(transport.CloseIdleConnections)
	ing := c.AddIngress(t)
	c.BaseURL, c.URL = ing.BaseURL, ing.URL
	c.Aggregator, c.Ingress, c.Jobs, c.Registry = ing.Aggregator, ing.Ingress, ing.Jobs, ing.Registry
	return c
}

// Ingress is one ingress of the cluster, with its own NATS connection.
type Ingress struct {
	// URL is its JSON-RPC endpoint; BaseURL its root.
	URL, BaseURL string
	Aggregator   *aggregator.Aggregator
	Ingress      *ingress.Server
	// Conn is its NATS connection.
	Conn *nats.Conn
	// Jobs is its jobs service (nil without [WithJobs]).
	Jobs *jobs.Service
	// Registry is its registry of tools (nil without [WithDiscovery]).
	Registry *discovery.Registry
	// Runner runs the queued jobs as calls (nil without [WithJobs]).
	Runner *jobs.Runner

	killed atomic.Bool
}

// Kill closes the ingress's NATS connection at once, without draining, as
// a crashed process would: the calls it dispatched are never waited for
// again, and its HTTP server answers them as it can.
func (i *Ingress) Kill() {
	i.killed.Store(true)
	i.Conn.Close()
}

// startTimeout bounds the wait for a node to set up what it needs of
// JetStream, which on an embedded server takes milliseconds.
const startTimeout = time.Minute

// AddIngress starts another ingress replica on a connection of its own, as
// a second process would be; it stops when the test ends. It returns once
// the ingress is ready, its jobs service and idempotency store set up,
// and, [WithDiscovery], once its registry has heard the tools of every
// connected worker.
func (c *Cluster) AddIngress(t testing.TB) *Ingress {
	t.Helper()
	o := c.opts
	nc, err := c.NATS.Connect(bus.WithName("toolbustest-ingress"), bus.WithLogger(o.logger))
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(nc.Close)
	st := startup(t, o.logger)
	cfg, tel := c.gatewayConfig()
	var opts []node.GatewayOption
	if o.auth != nil {
		opts = append(opts, node.WithAuth(*o.auth))
	}
	g, err := node.NewGatewayFrom(nc, st, cfg, tel, opts...)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	if err := g.Start(l); err != nil {
		l.Close()
		t.Fatalf("toolbustest: ingress: %v", err)
	}
	ing := &Ingress{Conn: nc, Aggregator: g.Aggregator, Ingress: g.Ingress, Registry: g.Registry, Runner: g.Runner}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil && !ing.killed.Load() {
			t.Errorf("toolbustest: ingress: %v", err)
		}
	})
	ready(t, "ingress", st)
	ing.Jobs = g.Jobs()
	ing.BaseURL = "http://" + l.Addr().String()
	ing.URL = ing.BaseURL + "/rpc"
	for _, w := range c.workers {
		if w.Conn.IsConnected() {
			hear(t, ing, w)
		}
	}
	c.ingresses = append(c.ingresses, ing)
	return ing
}

// gatewayConfig returns the config and the telemetry of the cluster's
// next ingress: [node.DefaultGatewayConfig] on a free loopback port,
// without a heap goal's headroom, with what the cluster's options turn
// on and change. The metrics go to
// the registry of [WithMetrics] for the first ingress only.
func (c *Cluster) gatewayConfig() (node.GatewayConfig, node.Telemetry) {
	o := c.opts
	cfg := node.DefaultGatewayConfig()
	cfg.Listen, cfg.Version, cfg.Auth.Mode = "127.0.0.1:0", "dev", "off"
	// The collector's pace is the test process's, which many clusters
	// share: none of them sets it.
	cfg.GCHeadroom = 0
	cfg.Jobs.On, cfg.A2A.On = o.jobs, o.a2a
	cfg.Idempotency.On = o.idem
	if o.idemTTL != 0 {
		cfg.Idempotency.TTL = o.idemTTL
	}
	cfg.Discovery = o.discovery
	cfg.Metrics = o.metrics != nil && len(c.ingresses) == 0
	for _, change := range o.gateway {
		change(&cfg)
	}
	tel := node.Telemetry{Log: o.logger, Metrics: o.metrics, Tracer: o.tracer}
	if tel.Tracer == nil {
		tel.Tracer = otel.GetTracerProvider()
	}
	return cfg, tel
}

// hear waits until ing's registry lists every tool of w as live, so that
// a test's first call or job submit finds it; without a registry it
// returns at once.
func hear(t testing.TB, ing *Ingress, w *Worker) {
	t.Helper()
	if ing.Registry == nil {
		return
	}
	for _, m := range w.Runtime.Methods() {
		Eventually(t, func() bool { _, ok := ing.Registry.Lookup(m); return ok }, "the ingress's registry hears of "+m)
	}
}

// startup returns the startup of one node, stopped when the test ends.
func startup(t testing.TB, log *slog.Logger) *bus.Startup {
	st := bus.NewStartup(log)
	t.Cleanup(st.Stop)
	return st
}

// ready waits until the node of st has set up what it needs, failing the
// test if it cannot.
func ready(t testing.TB, what string, st *bus.Startup) {
	t.Helper()
	st.Begin()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-st.Ready():
	case err := <-st.Fatal():
		t.Fatalf("toolbustest: %s: %v", what, err)
	case <-timer.C:
		t.Fatalf("toolbustest: %s not ready after %v: %v", what, startTimeout, st.Err())
	}
}

// AddWorker starts another worker on a connection of its own, serving what
// register adds (the demo toolset when none is given). It is drained when
// the test ends, unless the test killed it. [WithDiscovery], it returns
// once every ingress's registry lists its tools.
func (c *Cluster) AddWorker(t testing.TB, register ...func(rt *worker.Runtime) error) *Worker {
	t.Helper()
	if len(register) == 0 {
		register = []func(*worker.Runtime) error{Demo}
	}
	nc, err := c.NATS.Connect(bus.WithName("toolbustest-worker"), bus.WithLogger(c.opts.logger))
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(nc.Close)
	rt, err := worker.New(nc, c.opts.workerOpts...)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	for _, r := range register {
		if err := r(rt); err != nil {
			t.Fatalf("toolbustest: register tools: %v", err)
		}
	}
	st := startup(t, c.opts.logger)
	w, err := node.NewWorker(nc, rt, st, node.WithLogger(c.opts.logger))
	if err != nil {
		t.Fatalf("toolbustest: worker: %v", err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatalf("toolbustest: start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Shutdown(ctx)
	})
	ready(t, "worker", st)
	// Make sure the subscriptions reached the server before calls are sent.
	if err := nc.Flush(); err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	wk := &Worker{Runtime: rt, Conn: nc}
	c.workers = append(c.workers, wk)
	for _, ing := range c.ingresses {
		if !ing.killed.Load() {
			hear(t, ing, wk)
		}
	}
	return wk
}

// Post sends body to the JSON-RPC endpoint with the given header pairs
// (name, value, name, value...) and returns the status and body. Content-Type
// is application/json unless a pair sets it.
func (c *Cluster) Post(t testing.TB, body string, header ...string) (int, []byte) {
	t.Helper()
	return c.PostURL(t, c.URL, body, header...)
}

// PostURL is [Cluster.Post] to another URL, such as a second ingress's.
func (c *Cluster) PostURL(t testing.TB, url, body string, header ...string) (int, []byte) {
	t.Helper()
	if len(header)%2 != 0 {
		t.Fatalf("toolbustest: Post header pairs are odd: %q", header)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("toolbustest: POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("toolbustest: read answer: %v", err)
	}
	return resp.StatusCode, data
}

// Call sends one call with id 1 and returns its response, failing the test
// on anything but a 200 with a single response.
func (c *Cluster) Call(t testing.TB, method, params string, header ...string) schema.Response {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q`, method)
	if params != "" {
		body += `,"params":` + params
	}
	status, data := c.Post(t, body+"}", header...)
	if status != http.StatusOK {
		t.Fatalf("toolbustest: %s answered HTTP %d: %s", method, status, data)
	}
	var r schema.Response
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("toolbustest: %s answer %s: %v", method, data, err)
	}
	return r
}

// Batch sends a batch and returns its responses, failing the test on
// anything but a 200 with an array.
func (c *Cluster) Batch(t testing.TB, body string, header ...string) []schema.Response {
	t.Helper()
	status, data := c.Post(t, body, header...)
	if status != http.StatusOK {
		t.Fatalf("toolbustest: batch answered HTTP %d: %s", status, data)
	}
	var rs []schema.Response
	if err := json.Unmarshal(data, &rs); err != nil {
		t.Fatalf("toolbustest: batch answer %s: %v", data, err)
	}
	return rs
}
