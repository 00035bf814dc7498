package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/internal/listen"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/a2abridge"
	"github.com/toolbus/toolbus/worker/conformtools"
	"github.com/toolbus/toolbus/worker/demo"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

// Telemetry is what a process reports through, made by its caller once
// for all its parts.
type Telemetry struct {
	// Log is the logger of every part.
	Log *slog.Logger
	// Metrics is the registry the parts' metrics go to.
	Metrics *prometheus.Registry
	// Tracer makes the spans of calls.
	Tracer trace.TracerProvider
	// Counters count the jobs of the gateway's service and runner; nil
	// for counters of the gateway's own ([WithJobCounters]).
	Counters *jobs.Counters
}

// NewGatewayFrom makes the gateway cfg describes on nc, whose background
// setups and readiness go through st, once cfg is valid, with opts
// applied after what cfg asks: node's own, for what a config does not
// hold, such as keys held in memory ([WithAuth]). It logs a warning when
// authentication is off. Nothing runs before [Gateway.Start].
func NewGatewayFrom(nc *nats.Conn, st *bus.Startup, cfg GatewayConfig, tel Telemetry, opts ...GatewayOption) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a, err := cfg.Auth.Load()
	if err != nil {
		return nil, err
	}
	caps, err := cfg.methodCaps()
	if err != nil {
		return nil, err
	}
	aggOpts := []aggregator.Option{
		aggregator.WithHeartbeat(cfg.Heartbeat, cfg.HeartbeatMisses),
		aggregator.WithMaxAttempts(cfg.MaxAttempts),
		aggregator.WithBusyWait(cfg.BusyWait),
		aggregator.WithHedge(cfg.Hedge),
		aggregator.WithIdempotencyCallerLimits(cfg.Idempotency.CallerMaxRecords, cfg.Idempotency.CallerMaxBytes),
		aggregator.WithIdempotencyFailOpen(cfg.Idempotency.FailOpen),
		aggregator.WithAckDelay(cfg.AckDelay),
		aggregator.WithDefaultTimeout(cfg.DefaultTimeout),
		aggregator.WithMaxTimeout(cfg.MaxTimeout),
		aggregator.WithBatchConcurrency(cfg.BatchConcurrency),
		aggregator.WithMaxInFlight(cfg.MaxInFlight),
		aggregator.WithAccessLog(cfg.AccessLog),
	}
	if cfg.AckTimeout > 0 {
		aggOpts = append(aggOpts, aggregator.WithAckTimeout(cfg.AckTimeout))
	}
	if len(cfg.RetrySafe) > 0 {
		aggOpts = append(aggOpts, aggregator.WithRetrySafe(cfg.RetrySafe...))
	}
	for m, n := range caps {
		aggOpts = append(aggOpts, aggregator.WithMethodMaxInFlight(m, n))
	}
	if cfg.BreakerFailures > 0 {
		aggOpts = append(aggOpts, aggregator.WithBreaker(aggregator.Breaker{
			Failures: cfg.BreakerFailures, OpenFor: cfg.BreakerOpenFor, Trials: cfg.BreakerTrials}))
	}
	if cfg.CallerMaxInFlight != 0 {
		aggOpts = append(aggOpts, aggregator.WithCallerMaxInFlight(cfg.CallerMaxInFlight))
	}
	if cfg.Local != nil {
		aggOpts = append(aggOpts, aggregator.WithLocal(cfg.Local))
	}
	// A caller's queue holds as many calls as may be in flight, unless
	// set.
	fairness := ingress.Fairness{Off: !cfg.Fair, Seats: cfg.FairSeats, HoldMin: cfg.FairHoldMin, HoldMax: cfg.FairHoldMax,
		CPUTarget: cfg.FairCPUTarget, Round: cfg.FairRound, CallerMaxQueued: cfg.CallerMaxQueued}
	if fairness.CallerMaxQueued == 0 {
		fairness.CallerMaxQueued = cfg.MaxInFlight
	}
	ingOpts := []ingress.Option{
		ingress.WithLimits(cfg.Limits),
		ingress.WithMaxTimeout(cfg.MaxTimeout),
		ingress.WithJSONRPC1(cfg.JSONRPC1),
		ingress.WithAccessLog(cfg.AccessLog),
		ingress.WithMaxHeaderBytes(cfg.MaxHeaderBytes),
		ingress.WithMaxConnsPerAddr(cfg.MaxConnsPerAddr),
		ingress.WithMaxBytesInFlight(cfg.MaxBytesInFlight),
		ingress.WithWebSocketMaxInFlight(cfg.WSMaxInFlight),
		ingress.WithWebSocketMaxUnsentBytes(cfg.WSMaxUnsentBytes),
		ingress.WithWebSocketWriteTimeout(cfg.WSWriteTimeout),
		ingress.WithWebSocketPing(cfg.WSPingInterval, cfg.WSPingMisses),
		ingress.WithSSEHeartbeat(cfg.SSEHeartbeat),
		ingress.WithFairness(fairness),
		ingress.WithTracerProvider(tel.Tracer),
		ingress.WithDashboard(cfg.Dashboard),
		ingress.WithMetricsCallers(cfg.MetricsCallers),
		// With no methods to log, the redaction list still hides failed
		// values in the dashboard's recent errors.
		ingress.WithMessageLog(cfg.MessageLog),
	}
	if cfg.CallerMaxBytesInFlight != 0 {
		ingOpts = append(ingOpts, ingress.WithCallerMaxBytesInFlight(cfg.CallerMaxBytesInFlight))
	}
	if len(cfg.WSOrigins) > 0 {
		ingOpts = append(ingOpts, ingress.WithWebSocketOrigins(cfg.WSOrigins...))
	}
	if cfg.MCPStateKey != "" {
		ingOpts = append(ingOpts, ingress.WithMCPStateKey([]byte(cfg.MCPStateKey)))
	}
	if cfg.Auth.Mode != "off" {
		ingOpts = append(ingOpts, ingress.WithAuth(a))
	}
	if cfg.RateLimit > 0 {
		ingOpts = append(ingOpts, ingress.WithRateLimit(quota.RateLimit{PerSecond: cfg.RateLimit, Burst: cfg.RateBurst}))
	}
	own := []GatewayOption{
		withParts(aggOpts, ingOpts, cfg.Auth.Mode == "off"),
		WithPrefix(cfg.Prefix),
		WithLogger(tel.Log),
		WithVersion(cfg.Version),
		WithReplicas(cfg.Jobs.Replicas),
	}
	if cfg.Metrics {
		own = append(own, WithMetrics(tel.Metrics))
	}
	if cfg.Idempotency.On {
		own = append(own, WithIdempotency(cfg.Idempotency.TTL, cfg.Idempotency.MaxBytes))
	}
	if cfg.Discovery {
		own = append(own, WithRegistry(), WithValidation(cfg.ValidateParams), WithToolsRetention(cfg.ToolsRetention))
	}
	if tel.Counters != nil {
		own = append(own, WithJobCounters(tel.Counters))
	}
	// The A2A door runs its tasks as jobs: without them it is off.
	if cfg.Jobs.On {
		own = append(own, WithJobs(cfg.Jobs), WithA2A(cfg.A2A))
	}
	return NewGateway(nc, st, append(own, opts...)...)
}

// Validate checks the settings of c's jobs service and runner, naming
// the flag of the first that cannot be used; nothing when jobs are off.
func (c JobsConfig) Validate() error {
	if !c.On {
		return nil
	}
	service := []struct {
		flag string
		opt  jobs.Option
	}{
		{"--job-ttl", jobs.WithTTL(c.TTL)},
		{"--job-max-attempts", jobs.WithMaxAttempts(c.MaxAttempts)},
		{"--job-queue-max-bytes and --job-records-max-bytes", jobs.WithStoreBytes(c.QueueMaxBytes, c.RecordsMaxBytes)},
		{"--job-caller-max-queued", jobs.WithCallerMaxQueued(c.CallerMaxQueued)},
		{"--job-max-subscriptions and --job-caller-max-subscriptions", jobs.WithMaxSubscriptions(c.MaxSubscriptions, c.CallerMaxSubscriptions)},
	}
	for _, s := range service {
		if err := jobs.CheckOptions(s.opt); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	runner := []struct {
		flag string
		opt  jobs.RunnerOption
	}{
		{"--job-lease", jobs.WithLease(c.Lease)},
		{"--job-concurrency", jobs.WithRunConcurrency(c.Concurrency)},
		{"--job-max-run-time", jobs.WithMaxRunTime(c.MaxRunTime)},
		{"--job-progress-interval", jobs.WithProgressInterval(c.ProgressInterval)},
		{"--job-wait-backoff and --job-max-wait-backoff", jobs.WithWaitBackoff(c.WaitBackoff, c.MaxWaitBackoff)},
	}
	for _, r := range runner {
		if err := jobs.CheckRunnerOptions(r.opt); err != nil {
			return fmt.Errorf("%s: %w", r.flag, err)
		}
	}
	return nil
}

// serviceOptions are the options of the jobs service c describes, which
// follow the gateway's own (subjects, logger, replicas, counters).
func (c JobsConfig) serviceOptions() []jobs.Option {
	opts := []jobs.Option{
		jobs.WithTTL(c.TTL),
		jobs.WithMaxAttempts(c.MaxAttempts),
		jobs.WithStoreBytes(c.QueueMaxBytes, c.RecordsMaxBytes),
		jobs.WithCallerMaxQueued(c.CallerMaxQueued),
		jobs.WithMaxSubscriptions(c.MaxSubscriptions, c.CallerMaxSubscriptions),
	}
	if c.CallbackSecret != "" {
		opts = append(opts, jobs.WithCallbackSecret([]byte(c.CallbackSecret)), jobs.WithCallbackAllow(c.CallbackAllow...))
	}
	return opts
}

// runnerOptions are the options of the job runner c describes, which
// follow the gateway's own (subjects, logger, replicas, counters).
func (c JobsConfig) runnerOptions() []jobs.RunnerOption {
	return []jobs.RunnerOption{
		jobs.WithLease(c.Lease),
		jobs.WithRunConcurrency(c.Concurrency),
		jobs.WithMaxRunTime(c.MaxRunTime),
		jobs.WithProgressInterval(c.ProgressInterval),
		jobs.WithWaitBackoff(c.WaitBackoff, c.MaxWaitBackoff),
	}
}

// toolsets maps the names [WorkerConfig.Tools] accepts to what registers
// them with the worker's configuration.
var toolsets = map[string]func(*worker.Runtime, WorkerConfig) error{
	"demo": func(rt *worker.Runtime, c WorkerConfig) error {
		return demo.Register(rt, demo.WithFetchAllow(c.FetchAllow...))
	},
	// conform is the toolset `toolbus conform` drives a worker with.
	"conform": func(rt *worker.Runtime, _ WorkerConfig) error { return conformtools.Register(rt) },
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

// NewWorkerFrom makes the worker cfg describes on nc, whose background
// setups and readiness go through st, once cfg is valid: a runtime with
// its toolsets, the bridges to the MCP server and the A2A agent it serves
// the tools of, and, with [WorkerConfig.MetricsListen], its probes and
// metrics over HTTP. Nothing runs before [Worker.Start].
func NewWorkerFrom(nc *nats.Conn, st *bus.Startup, cfg WorkerConfig, tel Telemetry) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The runtime and the worker's status service share the subject
	// names, made once.
	subjects, err := bus.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	wopts := []worker.Option{worker.WithSubjects(subjects), worker.WithConcurrency(cfg.Concurrency), worker.WithLogger(tel.Log),
		worker.WithVersion(cfg.Version), worker.WithMetrics(tel.Metrics), worker.WithTracerProvider(tel.Tracer)}
	if !cfg.Announce {
		wopts = append(wopts, worker.WithoutAnnounce())
	}
	rt, err := worker.New(nc, wopts...)
	if err != nil {
		return nil, err
	}
	for _, name := range cfg.Tools {
		if err := toolsets[name](rt, cfg); err != nil {
			return nil, fmt.Errorf("worker: toolset %s: %w", name, err)
		}
	}
	w, err := NewWorker(nc, rt, st, WithSubjects(subjects), WithLogger(tel.Log), WithVersion(cfg.Version))
	if err != nil {
		return nil, err
	}
	mb, err := cfg.MCP.bridge(rt, bus.Origin(nc, cfg.Prefix), tel.Log)
	if err != nil {
		return nil, err
	}
	if mb != nil {
		w.bridges = append(w.bridges, mb)
	}
	ab, err := cfg.A2A.bridge(rt, tel.Log)
	if err != nil {
		return nil, err
	}
	if ab != nil {
		w.bridges = append(w.bridges, ab)
	}
	if cfg.MetricsListen != "" {
		w.probesAddr = cfg.MetricsListen
		w.probes = &http.Server{Handler: worker.ProbeHandler(tel.Metrics, w.Ready),
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	}
	return w, nil
}

// bridge returns the bridge to the MCP server of c, or nil when there is
// none. It imports no tool of origin, the cluster rt serves on.
func (c MCPBridgeConfig) bridge(rt *worker.Runtime, origin string, log *slog.Logger) (*mcpbridge.Bridge, error) {
	var connect mcpbridge.Connector
	switch {
	case c.Command != "":
		args := strings.Fields(c.Command)
		if len(args) == 0 {
			return nil, errors.New("worker: --mcp-command is blank: give the command that starts the MCP server")
		}
		connect = mcpbridge.Command(args[0], args[1:]...)
	case c.URL != "":
		connect = mcpbridge.URL(c.URL, nil)
	default:
		return nil, nil
	}
	opts := []mcpbridge.Option{mcpbridge.WithLogger(log), mcpbridge.WithOrigin(origin)}
	if c.Prefix != "" {
		opts = append(opts, mcpbridge.WithPrefix(c.Prefix))
	}
	b, err := mcpbridge.New(rt, connect, opts...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}

// bridge returns the bridge to the agent of c, or nil when there is none.
// The URL and prefix are checked by [a2abridge.New].
func (c A2ABridgeConfig) bridge(rt *worker.Runtime, log *slog.Logger) (*a2abridge.Bridge, error) {
	if c.URL == "" {
		return nil, nil
	}
	opts := []a2abridge.Option{a2abridge.WithLogger(log), a2abridge.WithCardRefresh(c.CardRefresh)}
	if c.Prefix != "" {
		opts = append(opts, a2abridge.WithPrefix(c.Prefix))
	}
	if c.Token != "" {
		opts = append(opts, a2abridge.WithBearerToken(c.Token))
	}
	if c.APIKey != "" {
		opts = append(opts, a2abridge.WithAPIKey(c.APIKeyHeader, c.APIKey))
	}
	b, err := a2abridge.New(rt, c.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}

// listenProbes opens the listener of a worker's probes; its sentence says
// what to change when the address is taken.
func listenProbes(addr string) (net.Listener, error) {
	return listen.Open(addr, `give each worker on a host its own --metrics-listen, such as 127.0.0.1:0 for any free port, or "" for none`)
}
