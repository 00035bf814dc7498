package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/internal/listen"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/a2abridge"
	"github.com/toolbus/toolbus/worker/conformtools"
	"github.com/toolbus/toolbus/worker/demo"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

// connector opens a NATS connection with a client name; the embedded mode
// connects in-process, the others over the network.
type connector func(name string) (*nats.Conn, error)

// ingressConfig is what the ingress and its aggregator are configured with.
type ingressConfig struct {
	listen           string
	prefix           string
	limits           ingress.Limits
	defaultTimeout   time.Duration
	maxTimeout       time.Duration
	batchConcurrency int
	maxInFlight      int
	callerInFlight   int
	// fair is how the ingress shares itself among callers, when fairOn.
	fair            ingress.Fairness
	fairOn          bool
	shutdownTimeout time.Duration
	jsonrpc1        bool
	accessLog       bool
	// local, when set, takes the calls a worker of the same process can
	// run at once, without the bus (the dev command's --local-calls).
	local           aggregator.Local
	maxHeaderBytes  int
	maxConnsPerAddr int
	maxBytes        int64
	callerMaxBytes  int64
	wsMaxInFlight   int
	wsMaxUnsent     int64
	wsWriteTimeout  time.Duration
	wsPingInterval  time.Duration
	wsPingMisses    int
	wsOrigins       []string
	sseHeartbeat    time.Duration
	jobs            bool
	jobLease        time.Duration
	jobConcurrency  int
	jobTTL          time.Duration
	jobReplicas     int
	jobMaxAttempts  int
	jobQueueBytes   int64
	jobCallerQueued int64
	jobMaxSubs      int
	jobCallerSubs   int
	jobRecordsBytes int64
	callbackSecret  string
	callbackAllow   []string
	mcpStateKey     string
	discovery       bool
	validate        bool
	a2a             bool
	a2aTextMethod   string
	a2aPublicSkills []string
	a2aPushConfigs  int
	a2aPushBytes    int64
	toolsRetention  time.Duration
	// sec is the authentication, admission and resilience policy.
	sec securityConfig
	// obs is what the ingress shows of itself.
	obs observeConfig
}

func (c *ingressConfig) flags(cmd *cobra.Command, defaultListen string) {
	f := cmd.Flags()
	f.StringVar(&c.listen, "listen", defaultListen, "HTTP listen address of the ingress (port 0 picks a free port)")
	f.StringVar(&c.prefix, "prefix", bus.DefaultPrefix, "NATS subject prefix of the cluster")
	f.Int64Var(&c.limits.MaxBodyBytes, "max-body-bytes", ingress.DefaultMaxBodyBytes, "largest request body in bytes")
	f.IntVar(&c.limits.MaxBatchItems, "max-batch-items", ingress.DefaultMaxBatchItems, "most calls in one batch")
	f.IntVar(&c.limits.MaxDepth, "max-depth", ingress.DefaultMaxDepth, "deepest JSON nesting of a request body")
	f.DurationVar(&c.defaultTimeout, "default-timeout", aggregator.DefaultTimeout, "deadline of a call when nothing shorter is asked")
	f.DurationVar(&c.maxTimeout, "max-timeout", aggregator.DefaultMaxTimeout, "longest deadline any call may get")
	f.IntVar(&c.batchConcurrency, "batch-concurrency", aggregator.DefaultBatchConcurrency, "calls of one batch in flight at once")
	f.IntVar(&c.maxInFlight, "max-in-flight", aggregator.DefaultMaxInFlight, "calls in flight on this ingress; more are refused with -32002")
	f.IntVar(&c.callerInFlight, "caller-max-in-flight", 0, "calls in flight on this ingress for one authenticated caller (0: half of --max-in-flight); without auth the one anonymous caller may use all of --max-in-flight")
	f.BoolVar(&c.fairOn, "fair", true, "share the ingress among callers rather than requests: per-caller queues and a fair scheduler admit calls into a window of seats (false: calls are served in arrival order)")
	f.IntVar(&c.fair.Seats, "fair-seats", fair.DefaultSeats, "calls the ingress works on at once; the callers with calls waiting share them in proportion to their weights")
	f.DurationVar(&c.fair.HoldMin, "fair-hold-min", fair.DefaultHoldMin, "shortest time a call keeps its seat without an answer before it counts as waiting on a worker and leaves its seat to the next (the hold adapts to how long calls take, up to --fair-hold-max)")
	f.DurationVar(&c.fair.HoldMax, "fair-hold-max", fair.DefaultHoldMax, "longest time a call keeps its seat without an answer")
	f.Float64Var(&c.fair.CPUTarget, "fair-cpu-target", fair.DefaultCPUTarget, "share of the ingress's CPUs that admitted calls may take while more than one caller is busy; below 1, calls are admitted at a pace above it, so that the ingress stays idle often enough to read every caller's next request (1: no pacing; 0.85 paces a saturated ingress)")
	f.IntVar(&c.fair.CallerMaxQueued, "caller-max-queued", 0, "calls one caller may have waiting for a seat on this ingress, a call counting once more per 16 KiB of params (0: as many as --max-in-flight); more are refused -32002")
	f.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long shutdown waits for calls in flight")
	f.BoolVar(&c.jsonrpc1, "jsonrpc1", false, "answer requests without a jsonrpc member in JSON-RPC 1.0 form")
	f.BoolVar(&c.accessLog, "access-log", false, "log a line per HTTP request and per call at level info (default: at level debug, so nothing is logged per call at the default level)")
	f.IntVar(&c.maxHeaderBytes, "max-header-bytes", ingress.DefaultMaxHeaderBytes, "largest request line and headers in bytes (431 beyond)")
	f.IntVar(&c.maxConnsPerAddr, "max-conns-per-addr", ingress.DefaultMaxConnsPerAddr, "connections one client IP address may have open (0: no bound, as behind a proxy)")
	f.Int64Var(&c.maxBytes, "max-bytes-in-flight", ingress.DefaultMaxBytesInFlight, "bytes of answers the ingress holds unwritten, over all callers")
	f.Int64Var(&c.callerMaxBytes, "caller-max-bytes-in-flight", 0, "bytes of answers the ingress holds unwritten for one authenticated caller (0: half of --max-bytes-in-flight)")
	f.IntVar(&c.wsMaxInFlight, "ws-max-in-flight", ingress.DefaultWebSocketMaxInFlight, "calls in flight on one WebSocket connection")
	f.Int64Var(&c.wsMaxUnsent, "ws-max-unsent-bytes", ingress.DefaultWebSocketMaxUnsentBytes, "bytes of answers a WebSocket client may leave unread before its connection is closed")
	f.DurationVar(&c.wsWriteTimeout, "ws-write-timeout", ingress.DefaultWebSocketWriteTimeout, "how long writing one message to a WebSocket client may take before its connection is closed")
	f.DurationVar(&c.wsPingInterval, "ws-ping-interval", ingress.DefaultPingInterval, "how often the server pings a WebSocket client")
	f.IntVar(&c.wsPingMisses, "ws-ping-misses", ingress.DefaultPingMisses, "unanswered pings after which a WebSocket connection is closed")
	f.StringSliceVar(&c.wsOrigins, "ws-origins", nil, "origin patterns allowed to open a WebSocket besides the same origin (e.g. *.example.com)")
	f.DurationVar(&c.sseHeartbeat, "sse-heartbeat", ingress.DefaultSSEHeartbeat, "interval of the comment lines that keep an SSE stream alive")
	f.BoolVar(&c.jobs, "jobs", true, "serve the rpc.jobs.* methods on JetStream and run the queued jobs as calls to the workers (needs JetStream)")
	f.DurationVar(&c.jobLease, "job-lease", jobs.DefaultLease, "how long a job stays leased to this ingress's runner without a sign of life")
	f.IntVar(&c.jobConcurrency, "job-concurrency", jobs.DefaultRunConcurrency, "jobs this ingress's runner sends to workers at once")
	f.DurationVar(&c.jobTTL, "job-ttl", jobs.DefaultTTL, "how long a finished job's record is kept")
	f.IntVar(&c.jobReplicas, "job-replicas", jobs.DefaultReplicas, "JetStream replicas of the job stream and records (3 on a three-node cluster)")
	f.IntVar(&c.jobMaxAttempts, "job-max-attempts", jobs.DefaultMaxAttempts, "how many times a job may start running")
	f.Int64Var(&c.jobCallerQueued, "job-caller-max-queued", jobs.DefaultCallerMaxQueued, "jobs one authenticated caller may have queued or running (without auth the anonymous caller is bounded by the queue alone)")
	f.IntVar(&c.jobMaxSubs, "job-max-subscriptions", jobs.DefaultMaxSubscriptions, "jobs followed at once on this ingress (WebSocket subscriptions, A2A streams and blocking sends, MCP calls with progress), over all callers and by the anonymous caller")
	f.IntVar(&c.jobCallerSubs, "job-caller-max-subscriptions", jobs.DefaultCallerMaxSubscriptions, "jobs one authenticated caller may follow at once on this ingress (-32002, limit caller_max_subscriptions)")
	f.Int64Var(&c.jobQueueBytes, "job-queue-max-bytes", jobs.DefaultQueueMaxBytes, "byte cap of the JetStream stream of queued jobs")
	f.Int64Var(&c.jobRecordsBytes, "job-records-max-bytes", jobs.DefaultRecordsMaxBytes, "byte cap of the JetStream bucket of job records")
	f.StringVar(&c.callbackSecret, "callback-secret", "", "secret (16 bytes or more) that signs job completion callbacks; without it notify_url is refused")
	f.StringSliceVar(&c.callbackAllow, "callback-allow", nil, "internal receivers job callbacks may reach although loopback, private or link-local: CIDRs, addresses and host names, each with an optional :port (e.g. 10.0.0.0/8,hooks.internal:8443)")
	f.StringVar(&c.mcpStateKey, "mcp-state-key", "", "secret (16 bytes or more) that signs the request state of an MCP tools/call that asks its client (MCP 2026-07-28 and later); give every ingress behind one address the same, so that the client's retry resumes the job on any of them (default: a random key per process)")
	f.BoolVar(&c.discovery, "discovery", true, "keep a registry of the tools workers announce: rpc.discover, GET /openrpc.json, the MCP front door at /mcp, -32003 for known methods without workers")
	f.BoolVar(&c.validate, "validate", true, "check params against the announced schemas before any worker runs, and at job submit (needs --discovery)")
	f.DurationVar(&c.toolsRetention, "tools-retention", discovery.DefaultRetention, "how long a tool stays known after its last worker was seen, so that its jobs are still taken (kept in JetStream with --jobs)")
	f.BoolVar(&c.a2a, "a2a", true, "serve the A2A front door at POST /a2a and its agent card at /.well-known/agent-card.json, tasks as jobs (needs --jobs); push notifications reach internal receivers only through --callback-allow")
	f.StringVar(&c.a2aTextMethod, "a2a-text-method", "", `the method an A2A message of text alone goes to, with params {"text": "..."} (default: such a message is refused)`)
	f.StringSliceVar(&c.a2aPublicSkills, "a2a-public-skills", nil, "method patterns whose skills the public A2A agent card lists while authentication is on (e.g. echo,math.*); without auth it lists every skill")
	f.IntVar(&c.a2aPushConfigs, "a2a-push-caller-max-configs", a2a.DefaultPushCallerMaxConfigs, "A2A push notification configs one caller may keep over all its tasks not yet final, counted in JetStream across every ingress")
	f.Int64Var(&c.a2aPushBytes, "a2a-push-caller-max-bytes", a2a.DefaultPushCallerMaxBytes, "bytes of the A2A push notification configs one caller may keep over all its tasks not yet final, counted in JetStream across every ingress")
	c.obs.flags(cmd)
}

// validateCallbacks checks the entries of --callback-allow. Commands call
// it before anything connects or starts, so that a typo is reported as
// such rather than as a job service that never gets ready.
func (c *ingressConfig) validateCallbacks() error {
	if _, err := egress.New(egress.WithAllow(c.callbackAllow...)); err != nil {
		return fmt.Errorf("--callback-allow: %w", err)
	}
	return nil
}

// defaultIngressConfig is the configuration the in-process commands (demo,
// bench) run with: the flag defaults on a free loopback port.
func defaultIngressConfig() ingressConfig {
	var c ingressConfig
	cmd := &cobra.Command{}
	c.flags(cmd, "127.0.0.1:0")
	c.sec.flags(cmd, true)
	return c
}

// workerConfig is what a worker process is configured with.
type workerConfig struct {
	prefix          string
	tools           []string
	concurrency     int
	shutdownTimeout time.Duration
	announce        bool
	mcpCommand      string
	mcpURL          string
	mcpPrefix       string
	a2a             a2aBridgeConfig
	// fetchAllow admits internal addresses to the demo toolset's
	// fetch_page.
	fetchAllow []string
	// metricsListen is where a standalone worker serves /metrics,
	// /healthz and /readyz; empty for nowhere. In the one-process
	// commands the ingress serves the worker's metrics.
	metricsListen string
	standalone    bool
	// local, when set, is given the runtime once it exists, for the
	// ingress of the same process.
	local *localWorker
}

// flags defines the worker's flags; standalone adds those that the dev
// command shares with the ingress (--prefix), and accepts the job flags
// of workers that ran jobs themselves, which have no effect now.
func (c *workerConfig) flags(cmd *cobra.Command, standalone bool) {
	f := cmd.Flags()
	c.standalone = standalone
	if standalone {
		f.StringVar(&c.metricsListen, "metrics-listen", "0.0.0.0:9464", "HTTP address of the worker's /metrics, /healthz and /readyz (empty for none)")
		f.StringVar(&c.prefix, "prefix", bus.DefaultPrefix, "NATS subject prefix of the cluster")
		// A worker runs jobs as calls, sent by the ingresses' runners.
		f.Bool("jobs", true, "")
		f.Duration("job-lease", jobs.DefaultLease, "")
		f.Int("job-concurrency", jobs.DefaultRunConcurrency, "")
		for _, name := range []string{"jobs", "job-lease", "job-concurrency"} {
			_ = f.MarkDeprecated(name, "a worker runs jobs as calls sent by the ingress, which has --job-lease and --job-concurrency; drop it from the worker's command line")
		}
	}
	f.StringSliceVar(&c.tools, "tools", []string{"demo"}, "toolsets to serve (available: demo, conform)")
	f.IntVar(&c.concurrency, "concurrency", worker.DefaultConcurrency, "calls of one method a worker runs at once")
	f.DurationVar(&c.shutdownTimeout, "drain-timeout", 30*time.Second, "how long a worker drains its calls on shutdown")
	f.BoolVar(&c.announce, "announce", true, "announce the worker's tools and their schemas for discovery")
	f.StringVar(&c.mcpCommand, "mcp-command", "", `serve the tools of the MCP server this command starts, over stdio ("CMD ARGS", split at spaces)`)
	f.StringVar(&c.mcpURL, "mcp-url", "", "serve the tools of the MCP server at this Streamable HTTP URL")
	f.StringVar(&c.mcpPrefix, "mcp-prefix", "", "put this prefix and a dot before the bridged MCP tools' method names")
	c.a2a.flags(cmd)
	f.StringSliceVar(&c.fetchAllow, "fetch-allow", nil, "internal addresses the demo tool fetch_page may reach although loopback, private or link-local: CIDRs, addresses and host names, each with an optional :port (e.g. 127.0.0.1:9000)")
}

// defaultWorkerConfig is the configuration the in-process commands (demo,
// bench) run their worker with: the flag defaults.
func defaultWorkerConfig() workerConfig {
	c := workerConfig{prefix: bus.DefaultPrefix}
	c.flags(&cobra.Command{}, false)
	return c
}

// validate checks the toolsets. Commands call it before anything connects
// or starts, so that a typo is reported as such even when NATS is
// unreachable, and nothing is left running after it.
func (c *workerConfig) validate() error {
	if c.mcpCommand != "" && c.mcpURL != "" {
		return errors.New("worker: give --mcp-command or --mcp-url, not both")
	}
	if c.mcpPrefix != "" && c.mcpCommand == "" && c.mcpURL == "" {
		return errors.New("worker: --mcp-prefix needs --mcp-command or --mcp-url")
	}
	if err := c.a2a.validate(); err != nil {
		return err
	}
	if len(c.tools) == 0 && c.mcpCommand == "" && c.mcpURL == "" && c.a2a.url == "" {
		return errors.New("worker: no toolsets given (--tools, --mcp-command, --mcp-url or --a2a-url)")
	}
	for _, name := range c.tools {
		if _, ok := toolsets[name]; !ok {
			return fmt.Errorf("worker: unknown toolset %q (available: demo, conform)", name)
		}
	}
	if _, err := egress.New(egress.WithAllow(c.fetchAllow...)); err != nil {
		return fmt.Errorf("--fetch-allow: %w", err)
	}
	return nil
}

// toolsets maps the names --tools accepts to what registers them with the
// worker's configuration.
var toolsets = map[string]func(*worker.Runtime, workerConfig) error{
	"demo": func(rt *worker.Runtime, c workerConfig) error {
		return demo.Register(rt, demo.WithFetchAllow(c.fetchAllow...))
	},
	// conform is the toolset `toolbus conform` drives a worker with.
	"conform": func(rt *worker.Runtime, _ workerConfig) error { return conformtools.Register(rt) },
}

// embeddedModule runs an embedded NATS server and connects to it in-process.
func embeddedModule(cfg bus.EmbeddedConfig) fx.Option {
	return embedded(cfg, func(e *bus.Embedded, name string) (*nats.Conn, error) {
		return e.Connect(bus.WithName(name))
	})
}

// embeddedTCPModule runs an embedded NATS server on a free loopback port and
// connects to it over TCP with its token, as separate processes would; the
// benchmark uses it to weigh the in-process connection.
func embeddedTCPModule() fx.Option {
	return embedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"}, func(e *bus.Embedded, name string) (*nats.Conn, error) {
		return bus.Connect(e.ClientURL(), bus.WithName(name), bus.WithToken(e.Token()))
	})
}

func embedded(cfg bus.EmbeddedConfig, connect func(e *bus.Embedded, name string) (*nats.Conn, error)) fx.Option {
	return fx.Options(
		fx.Provide(func(lc fx.Lifecycle) (*bus.Embedded, error) {
			e, err := bus.StartEmbedded(cfg)
			if err != nil {
				return nil, err
			}
			lc.Append(fx.StopHook(e.Shutdown))
			return e, nil
		}),
		fx.Provide(func(e *bus.Embedded) connector {
			return func(name string) (*nats.Conn, error) { return connect(e, name) }
		}),
	)
}

// remoteModule connects to NATS servers over the network, with opts (the
// authentication and TLS of [natsAuth]) after the client name. A
// connection is returned at once even when no server answers yet: it keeps
// trying in the background, and the process's [bus.Startup] says what it waits
// for until it is connected, or stops the process when the server refuses
// it for good.
func remoteModule(url string, opts ...bus.Option) fx.Option {
	return fx.Provide(func(st *bus.Startup) connector {
		return func(name string) (*nats.Conn, error) {
			o := append([]bus.Option{bus.WithName(name)}, opts...)
			o = append(o, bus.WithRetryOnFailedConnect(), bus.WithStatusFunc(st.WatchConn(name, url)))
			return bus.Connect(url, o...)
		}
	})
}

// ingressAddr is the address the ingress listens on, known once its
// listener is open.
type ingressAddr struct{ net.Addr }

// ingressModule runs the gateway: the HTTP ingress, its aggregator and
// what the configuration adds to them.
func ingressModule(cfg ingressConfig) fx.Option {
	return fx.Options(
		fx.Provide(func(lc fx.Lifecycle, connect connector, log *slog.Logger, metrics *prometheus.Registry,
			tp trace.TracerProvider, counters *jobs.Counters, st *bus.Startup) (*node.Gateway, ingressAddr, error) {
			opts, err := cfg.gatewayOptions(log, metrics, tp, counters)
			if err != nil {
				return nil, ingressAddr{}, err
			}
			nc, err := connect("toolbus-ingress")
			if err != nil {
				return nil, ingressAddr{}, err
			}
			// Appended first, the connection drains last.
			lc.Append(fx.StopHook(func() { bus.Drain(nc) }))
			g, err := node.NewGateway(nc, st, opts...)
			if err != nil {
				return nil, ingressAddr{}, err
			}
			l, err := listen.Open(cfg.listen, "choose another address with --listen")
			if err != nil {
				return nil, ingressAddr{}, err
			}
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error { return g.Start(l) },
				OnStop: func(ctx context.Context) error {
					ctx, cancel := context.WithTimeout(ctx, cfg.shutdownTimeout)
					defer cancel()
					return g.Shutdown(ctx)
				},
			})
			return g, ingressAddr{l.Addr()}, nil
		}),
		fx.Invoke(func(*node.Gateway) {}),
	)
}

// fairness is how the ingress of c shares itself among callers (see
// [ingress.Fairness]): a caller's queue holds as many calls as may be in
// flight, unless set.
func (c ingressConfig) fairness() ingress.Fairness {
	f := c.fair
	f.Off = !c.fairOn
	if f.CallerMaxQueued == 0 {
		f.CallerMaxQueued = c.maxInFlight
	}
	return f
}

// gatewayOptions are the gateway options of c.
func (c ingressConfig) gatewayOptions(log *slog.Logger, metrics *prometheus.Registry, tp trace.TracerProvider,
	counters *jobs.Counters) ([]node.GatewayOption, error) {
	aggOpts, err := c.sec.aggregatorOptions()
	if err != nil {
		return nil, err
	}
	aggOpts = append(aggOpts,
		aggregator.WithDefaultTimeout(c.defaultTimeout),
		aggregator.WithMaxTimeout(c.maxTimeout),
		aggregator.WithBatchConcurrency(c.batchConcurrency),
		aggregator.WithMaxInFlight(c.maxInFlight),
		aggregator.WithAccessLog(c.accessLog))
	if c.callerInFlight != 0 {
		aggOpts = append(aggOpts, aggregator.WithCallerMaxInFlight(c.callerInFlight))
	}
	if c.local != nil {
		aggOpts = append(aggOpts, aggregator.WithLocal(c.local))
	}
	ingOpts := []ingress.Option{
		ingress.WithLimits(c.limits),
		ingress.WithMaxTimeout(c.maxTimeout),
		ingress.WithJSONRPC1(c.jsonrpc1),
		ingress.WithAccessLog(c.accessLog),
		ingress.WithMaxHeaderBytes(c.maxHeaderBytes),
		ingress.WithMaxConnsPerAddr(c.maxConnsPerAddr),
		ingress.WithMaxBytesInFlight(c.maxBytes),
		ingress.WithWebSocketMaxInFlight(c.wsMaxInFlight),
		ingress.WithWebSocketMaxUnsentBytes(c.wsMaxUnsent),
		ingress.WithWebSocketWriteTimeout(c.wsWriteTimeout),
		ingress.WithWebSocketPing(c.wsPingInterval, c.wsPingMisses),
		ingress.WithSSEHeartbeat(c.sseHeartbeat),
		ingress.WithFairness(c.fairness()),
	}
	if c.callerMaxBytes != 0 {
		ingOpts = append(ingOpts, ingress.WithCallerMaxBytesInFlight(c.callerMaxBytes))
	}
	if len(c.wsOrigins) > 0 {
		ingOpts = append(ingOpts, ingress.WithWebSocketOrigins(c.wsOrigins...))
	}
	if c.mcpStateKey != "" {
		ingOpts = append(ingOpts, ingress.WithMCPStateKey([]byte(c.mcpStateKey)))
	}
	sec, err := c.sec.ingressOptions(log)
	if err != nil {
		return nil, err
	}
	ingOpts = append(ingOpts, sec...)
	ingOpts = append(ingOpts, c.obs.ingressOptions(tp)...)
	opts := []node.GatewayOption{
		node.WithPrefix(c.prefix),
		node.WithLogger(log),
		node.WithVersion(buildVersion()),
		node.WithReplicas(c.jobReplicas),
	}
	if c.obs.metrics {
		opts = append(opts, node.WithMetrics(metrics))
	}
	if c.sec.idempotency {
		opts = append(opts, node.WithIdempotency(c.sec.idemTTL, c.sec.idemMaxBytes))
	}
	if c.discovery {
		opts = append(opts, node.WithRegistry(), node.WithValidation(c.validate), node.WithToolsRetention(c.toolsRetention))
	}
	if c.jobs {
		jobOpts := []jobs.Option{
			jobs.WithTTL(c.jobTTL),
			jobs.WithMaxAttempts(c.jobMaxAttempts),
			jobs.WithStoreBytes(c.jobQueueBytes, c.jobRecordsBytes),
			jobs.WithCallerMaxQueued(c.jobCallerQueued),
			jobs.WithMaxSubscriptions(c.jobMaxSubs, c.jobCallerSubs),
			jobs.WithCounters(counters),
		}
		if c.callbackSecret != "" {
			jobOpts = append(jobOpts, jobs.WithCallbackSecret([]byte(c.callbackSecret)), jobs.WithCallbackAllow(c.callbackAllow...))
		}
		opts = append(opts, node.WithJobs(jobOpts...), node.WithJobRunner(
			jobs.WithLease(c.jobLease),
			jobs.WithRunConcurrency(c.jobConcurrency),
			jobs.WithRunnerCounters(counters)))
		if c.a2a {
			a2aOpts := []a2a.Option{a2a.WithPublicSkills(c.a2aPublicSkills...), a2a.WithPushCallerLimits(c.a2aPushConfigs, c.a2aPushBytes)}
			if c.a2aTextMethod != "" {
				a2aOpts = append(a2aOpts, a2a.WithTextMethod(c.a2aTextMethod))
			}
			opts = append(opts, node.WithA2A(c.callbackAllow, a2aOpts...))
		}
	}
	return append(opts, node.WithAggregatorOptions(aggOpts...), node.WithIngressOptions(ingOpts...)), nil
}

// workerModule runs a worker runtime serving the configured toolsets.
func workerModule(cfg workerConfig) fx.Option {
	return fx.Invoke(func(lc fx.Lifecycle, connect connector, log *slog.Logger,
		metrics *prometheus.Registry, tp trace.TracerProvider, counters *jobs.Counters, st *bus.Startup) error {
		if err := cfg.validate(); err != nil {
			return err
		}
		nc, err := connect("toolbus-worker")
		if err != nil {
			return err
		}
		// Appended first, the connection closes last, and also when the
		// application stops before the worker has started (a start that
		// was canceled or failed in a later hook).
		lc.Append(fx.StopHook(func() { bus.Drain(nc) }))
		w, bridges, err := newWorker(nc, cfg, log, metrics, tp, counters, st)
		if err != nil {
			nc.Close()
			return err
		}
		for _, b := range bridges {
			// A bridge registers its server's tools before the runtime
			// subscribes, and stops after it has drained.
			lc.Append(fx.Hook{OnStart: b.Start, OnStop: func(context.Context) error { return b.Close() }})
		}
		// Registered before the worker's own hook, the probes stop after
		// it: /readyz says why while the worker drains.
		if cfg.metricsListen != "" {
			if err := workerHTTP(lc, cfg.metricsListen, worker.ProbeHandler(metrics, w.Ready), log); err != nil {
				nc.Close()
				return err
			}
		}
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return w.Start() },
			OnStop: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, cfg.shutdownTimeout)
				defer cancel()
				return w.Shutdown(ctx)
			},
		})
		if cfg.local != nil {
			cfg.local.rt.Store(w.Runtime)
		}
		log.Info("worker serving", "methods", w.Runtime.Methods())
		return nil
	})
}

// localWorker hands the dev command's ingress the worker runtime of the
// same process, once the worker module has made it: the aggregator's
// [aggregator.Local]. Before that, and for a method the runtime does not
// serve or has no free slot for, calls go over the bus.
type localWorker struct {
	rt atomic.Pointer[worker.Runtime]
}

// TryInvoke implements [aggregator.Local].
func (l *localWorker) TryInvoke(ctx context.Context, call *schema.Call) (json.RawMessage, *schema.Error, bool) {
	rt := l.rt.Load()
	if rt == nil {
		return nil, nil, false
	}
	return rt.TryInvoke(ctx, call)
}

// bridge serves the tools of a server of another protocol on a runtime:
// an MCP server ([mcpbridge.Bridge]) or an A2A agent ([a2abridge.Bridge]).
type bridge interface {
	Start(ctx context.Context) error
	Close() error
}

var (
	_ bridge = (*mcpbridge.Bridge)(nil)
	_ bridge = (*a2abridge.Bridge)(nil)
)

// newWorker makes the worker of cfg on nc, and the bridges to the MCP
// server and the A2A agent it serves the tools of, if any.
func newWorker(nc *nats.Conn, cfg workerConfig, log *slog.Logger, metrics *prometheus.Registry, tp trace.TracerProvider,
	counters *jobs.Counters, st *bus.Startup) (*node.Worker, []bridge, error) {
	wopts := []worker.Option{worker.WithPrefix(cfg.prefix), worker.WithConcurrency(cfg.concurrency), worker.WithLogger(log), worker.WithVersion(buildVersion()),
		worker.WithMetrics(metrics), worker.WithTracerProvider(tp)}
	if !cfg.announce {
		wopts = append(wopts, worker.WithoutAnnounce())
	}
	rt, err := worker.New(nc, wopts...)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range cfg.tools {
		if err := toolsets[name](rt, cfg); err != nil {
			return nil, nil, fmt.Errorf("worker: toolset %s: %w", name, err)
		}
	}
	var bridges []bridge
	mb, err := newBridge(rt, bus.Origin(nc, cfg.prefix), cfg, log)
	if err != nil {
		return nil, nil, err
	}
	if mb != nil {
		bridges = append(bridges, mb)
	}
	ab, err := cfg.a2a.bridge(rt, log)
	if err != nil {
		return nil, nil, err
	}
	if ab != nil {
		bridges = append(bridges, ab)
	}
	w, err := node.NewWorker(nc, rt, st, node.WithPrefix(cfg.prefix), node.WithLogger(log), node.WithVersion(buildVersion()))
	if err != nil {
		return nil, nil, err
	}
	return w, bridges, nil
}

// newApp builds an fx application from modules, logging through the
// default logger and quiet about fx's own events, with tracing off.
func newApp(modules ...fx.Option) *fx.App {
	return newTracedApp(tracingConfig{exporter: traceOff, sample: 1}, "toolbus", modules...)
}

// newTracedApp is [newApp] with the tracing of tc, under the service name
// service.
func newTracedApp(tc tracingConfig, service string, modules ...fx.Option) *fx.App {
	return fx.New(
		fx.NopLogger,
		fx.Provide(func() *slog.Logger { return slog.Default() }),
		fx.Provide(func(lc fx.Lifecycle, log *slog.Logger) *bus.Startup {
			st := bus.NewStartup(log)
			lc.Append(fx.StopHook(st.Stop))
			return st
		}),
		telemetryModule(tc, service),
		fx.StartTimeout(30*time.Second),
		fx.StopTimeout(2*time.Minute),
		fx.Options(modules...),
	)
}
