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
	// for counters of the gateway's own ([withJobCounters]).
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
	aggOpts := options(cfg.aggregatorOptions(caps))
	if cfg.Local != nil {
		aggOpts = append(aggOpts, aggregator.WithLocal(cfg.Local))
	}
	ingOpts := append(options(cfg.ingressOptions()), ingress.WithTracerProvider(tel.Tracer))
	if cfg.Auth.Mode != "off" {
		ingOpts = append(ingOpts, ingress.WithAuth(a))
	}
	own := append(options(cfg.gatewayOptions()),
		withParts(aggOpts, ingOpts, cfg.Auth.Mode == "off"),
		withPrefix(cfg.Prefix),
		WithLogger(tel.Log),
		withVersion(cfg.Version))
	if cfg.Metrics {
		own = append(own, withMetrics(tel.Metrics))
	}
	if tel.Counters != nil {
		own = append(own, withJobCounters(tel.Counters))
	}
	return NewGateway(nc, st, append(own, opts...)...)
}

// flagged is an option of a part that a config asks for, with the flags
// it comes from: [GatewayConfig.Validate] names them when the part
// refuses the option.
type flagged[O any] struct {
	flags string
	opt   O
}

// options returns the options of fs, in order.
func options[O any](fs []flagged[O]) []O {
	out := make([]O, len(fs))
	for i, f := range fs {
		out[i] = f.opt
	}
	return out
}

// check applies the options of fs in order with apply, which reports
// whether the part refuses the options given so far, and returns the
// first refusal, prefixed with the flags of the option refused.
func check[O any](fs []flagged[O], apply func(...O) error) error {
	for i := range fs {
		if err := apply(options(fs[:i+1])...); err != nil {
			return fmt.Errorf("%s: %w", fs[i].flags, err)
		}
	}
	return nil
}

// aggregatorOptions returns the aggregator's options that c asks for,
// with caps, the per-method in-flight caps of --method-max-in-flight.
func (c GatewayConfig) aggregatorOptions(caps map[string]int) []flagged[aggregator.Option] {
	fs := []flagged[aggregator.Option]{
		{"--heartbeat and --heartbeat-misses", aggregator.WithHeartbeat(c.Heartbeat, c.HeartbeatMisses)},
		{"--max-attempts", aggregator.WithMaxAttempts(c.MaxAttempts)},
		{"--busy-wait", aggregator.WithBusyWait(c.BusyWait)},
		{"--hedge", aggregator.WithHedge(c.Hedge)},
		{"--idempotency-caller-max-records and --idempotency-caller-max-bytes",
			aggregator.WithIdempotencyCallerLimits(c.Idempotency.CallerMaxRecords, c.Idempotency.CallerMaxBytes)},
		{"--idempotency-fail-open", aggregator.WithIdempotencyFailOpen(c.Idempotency.FailOpen)},
		{"--ack-delay", aggregator.WithAckDelay(c.AckDelay)},
		{"--default-timeout", aggregator.WithDefaultTimeout(c.DefaultTimeout)},
		{"--max-timeout", aggregator.WithMaxTimeout(c.MaxTimeout)},
		{"--batch-concurrency", aggregator.WithBatchConcurrency(c.BatchConcurrency)},
		{"--max-in-flight", aggregator.WithMaxInFlight(c.MaxInFlight)},
		{"--access-log", aggregator.WithAccessLog(c.AccessLog)},
	}
	if c.AckTimeout > 0 {
		fs = append(fs, flagged[aggregator.Option]{"--ack-timeout", aggregator.WithAckTimeout(c.AckTimeout)})
	}
	if len(c.RetrySafe) > 0 {
		fs = append(fs, flagged[aggregator.Option]{"--retry-safe", aggregator.WithRetrySafe(c.RetrySafe...)})
	}
	for m, n := range caps {
		fs = append(fs, flagged[aggregator.Option]{"--method-max-in-flight", aggregator.WithMethodMaxInFlight(m, n)})
	}
	if c.BreakerFailures > 0 {
		fs = append(fs, flagged[aggregator.Option]{"--breaker-failures, --breaker-open-for and --breaker-trials",
			aggregator.WithBreaker(aggregator.Breaker{Failures: c.BreakerFailures, OpenFor: c.BreakerOpenFor, Trials: c.BreakerTrials})})
	}
	if c.CallerMaxInFlight != 0 {
		fs = append(fs, flagged[aggregator.Option]{"--caller-max-in-flight", aggregator.WithCallerMaxInFlight(c.CallerMaxInFlight)})
	}
	return fs
}

// ingressOptions returns the ingress's options that c asks for, but for
// those of its authentication ([AuthConfig.Load]).
func (c GatewayConfig) ingressOptions() []flagged[ingress.Option] {
	// A caller's queue holds as many calls as may be in flight, unless
	// set.
	fairness := ingress.Fairness{Off: !c.Fair, Seats: c.FairSeats, HoldMin: c.FairHoldMin, HoldMax: c.FairHoldMax,
		CPUTarget: c.FairCPUTarget, Round: c.FairRound, CallerMaxQueued: c.CallerMaxQueued}
	if fairness.CallerMaxQueued == 0 {
		fairness.CallerMaxQueued = c.MaxInFlight
	}
	fs := []flagged[ingress.Option]{
		{"--max-body-bytes, --max-batch-items and --max-depth", ingress.WithLimits(c.Limits)},
		{"--max-timeout", ingress.WithMaxTimeout(c.MaxTimeout)},
		{"--jsonrpc1", ingress.WithJSONRPC1(c.JSONRPC1)},
		{"--access-log", ingress.WithAccessLog(c.AccessLog)},
		{"--max-header-bytes", ingress.WithMaxHeaderBytes(c.MaxHeaderBytes)},
		{"--max-conns-per-addr", ingress.WithMaxConnsPerAddr(c.MaxConnsPerAddr)},
		{"--max-bytes-in-flight", ingress.WithMaxBytesInFlight(c.MaxBytesInFlight)},
		{"--ws-max-in-flight", ingress.WithWebSocketMaxInFlight(c.WSMaxInFlight)},
		{"--ws-max-unsent-bytes", ingress.WithWebSocketMaxUnsentBytes(c.WSMaxUnsentBytes)},
		{"--ws-write-timeout", ingress.WithWebSocketWriteTimeout(c.WSWriteTimeout)},
		{"--ws-ping-interval and --ws-ping-misses", ingress.WithWebSocketPing(c.WSPingInterval, c.WSPingMisses)},
		{"--sse-heartbeat", ingress.WithSSEHeartbeat(c.SSEHeartbeat)},
		{"--fair, --fair-seats, --fair-hold-min, --fair-hold-max, --fair-cpu-target, --fair-round and --caller-max-queued",
			ingress.WithFairness(fairness)},
		{"--dashboard", ingress.WithDashboard(c.Dashboard)},
		{"--metrics-callers", ingress.WithMetricsCallers(c.MetricsCallers)},
		// With no methods to log, the redaction list still hides failed
		// values in the dashboard's recent errors.
		{"--message-log", ingress.WithMessageLog(c.MessageLog)},
	}
	if c.CallerMaxBytesInFlight != 0 {
		fs = append(fs, flagged[ingress.Option]{"--caller-max-bytes-in-flight", ingress.WithCallerMaxBytesInFlight(c.CallerMaxBytesInFlight)})
	}
	if len(c.WSOrigins) > 0 {
		fs = append(fs, flagged[ingress.Option]{"--ws-origins", ingress.WithWebSocketOrigins(c.WSOrigins...)})
	}
	if c.MCPStateKey != "" {
		fs = append(fs, flagged[ingress.Option]{"--mcp-state-key", ingress.WithMCPStateKey([]byte(c.MCPStateKey))})
	}
	if c.RateLimit > 0 {
		fs = append(fs, flagged[ingress.Option]{"--rate-limit and --rate-burst",
			ingress.WithRateLimit(quota.RateLimit{PerSecond: c.RateLimit, Burst: c.RateBurst})})
	}
	return fs
}

// gatewayOptions returns node's own options of a gateway that c asks
// for, but for its parts', its prefix, logger and version.
func (c GatewayConfig) gatewayOptions() []flagged[GatewayOption] {
	fs := []flagged[GatewayOption]{{"--job-replicas", withReplicas(c.Jobs.Replicas)}, {"--gc-headroom", withGCHeadroom(c.GCHeadroom)}}
	if c.Idempotency.On {
		fs = append(fs, flagged[GatewayOption]{"--idempotency-ttl and --idempotency-max-bytes",
			withIdempotency(c.Idempotency.TTL, c.Idempotency.MaxBytes)})
	}
	if c.Discovery {
		fs = append(fs, flagged[GatewayOption]{"--discovery", withRegistry()},
			flagged[GatewayOption]{"--validate", withValidation(c.ValidateParams)},
			flagged[GatewayOption]{"--tools-retention", withToolsRetention(c.ToolsRetention)})
	}
	// The A2A door runs its tasks as jobs: without them it is off.
	if c.Jobs.On {
		fs = append(fs, flagged[GatewayOption]{"--jobs", withJobs(c.Jobs)},
			flagged[GatewayOption]{"--a2a", withA2A(c.A2A)})
	}
	return fs
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
	w, err := NewWorker(nc, rt, st, withSubjects(subjects), WithLogger(tel.Log), withVersion(cfg.Version), withGCHeadroom(cfg.GCHeadroom))
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
	b, err := a2abridge.New(rt, c.URL, append(options(c.options()), a2abridge.WithLogger(log))...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}

// options returns the bridge's options that c asks for, but for its
// logger.
func (c A2ABridgeConfig) options() []flagged[a2abridge.Option] {
	fs := []flagged[a2abridge.Option]{{"--a2a-card-refresh", a2abridge.WithCardRefresh(c.CardRefresh)}}
	if c.Prefix != "" {
		fs = append(fs, flagged[a2abridge.Option]{"--a2a-prefix", a2abridge.WithPrefix(c.Prefix)})
	}
	if c.Token != "" {
		fs = append(fs, flagged[a2abridge.Option]{"--a2a-token", a2abridge.WithBearerToken(c.Token)})
	}
	if c.APIKey != "" {
		fs = append(fs, flagged[a2abridge.Option]{"--a2a-api-key-header and --a2a-api-key", a2abridge.WithAPIKey(c.APIKeyHeader, c.APIKey)})
	}
	return fs
}

// listenProbes opens the listener of a worker's probes; its sentence says
// what to change when the address is taken.
func listenProbes(addr string) (net.Listener, error) {
	return listen.Open(addr, `give each worker on a host its own --metrics-listen, such as 127.0.0.1:0 for any free port, or "" for none`)
}
