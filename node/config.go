package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/internal/authfile"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/a2abridge"
)

// GatewayConfig is everything an ingress process is built from: the HTTP
// server and its limits, the aggregator's policy, authentication, jobs,
// discovery, the A2A door and what the process shows of itself. Each
// field names, in parentheses, the flag of `toolbus ingress` and `toolbus
// dev` that sets it ([GatewayFlags]), and its default, which
// [DefaultGatewayConfig] holds. The zero value is not usable.
type GatewayConfig struct {
	// Listen (--listen) is the HTTP address of the ingress; port 0 picks a
	// free port. Default "0.0.0.0:8080".
	Listen string
	// Prefix (--prefix) is the NATS subject prefix of the cluster.
	// Default [bus.DefaultPrefix].
	Prefix string
	// ShutdownTimeout (--shutdown-timeout) is how long a shutdown waits
	// for the calls in flight. Default 30s.
	ShutdownTimeout time.Duration
	// Version is the version the status service reports. Default the
	// binary's ([BuildVersion]).
	Version string

	// Limits (--max-body-bytes, --max-batch-items, --max-depth) bound
	// what every door accepts. Default the [ingress.Limits] defaults.
	Limits ingress.Limits
	// MaxHeaderBytes (--max-header-bytes) bounds a request line and its
	// headers. Default [ingress.DefaultMaxHeaderBytes].
	MaxHeaderBytes int
	// MaxConnsPerAddr (--max-conns-per-addr) bounds the connections of one
	// client address; 0 for none. Default [ingress.DefaultMaxConnsPerAddr].
	MaxConnsPerAddr int
	// MaxBytesInFlight (--max-bytes-in-flight) bounds the bytes of answers
	// held unwritten. Default [ingress.DefaultMaxBytesInFlight].
	MaxBytesInFlight int64
	// CallerMaxBytesInFlight (--caller-max-bytes-in-flight) bounds them
	// for one authenticated caller; 0 for half of MaxBytesInFlight.
	// Default 0.
	CallerMaxBytesInFlight int64
	// JSONRPC1 (--jsonrpc1) answers requests without a jsonrpc member in
	// JSON-RPC 1.0 form. Default false.
	JSONRPC1 bool
	// AccessLog (--access-log) logs each request and call at level info
	// rather than debug. Default false.
	AccessLog bool
	// MCPStateKey (--mcp-state-key) signs the request state of an MCP
	// call that asks its client; empty for a random key per process.
	// Default empty.
	MCPStateKey string

	// WSMaxInFlight (--ws-max-in-flight) bounds the calls in flight on
	// one WebSocket. Default [ingress.DefaultWebSocketMaxInFlight].
	WSMaxInFlight int
	// WSMaxUnsentBytes (--ws-max-unsent-bytes) bounds the answers a
	// WebSocket client leaves unread. Default
	// [ingress.DefaultWebSocketMaxUnsentBytes].
	WSMaxUnsentBytes int64
	// WSWriteTimeout (--ws-write-timeout) bounds the writing of one
	// WebSocket message. Default [ingress.DefaultWebSocketWriteTimeout].
	WSWriteTimeout time.Duration
	// WSPingInterval (--ws-ping-interval) and WSPingMisses
	// (--ws-ping-misses) are how often a WebSocket client is pinged and
	// how many unanswered pings close it. Defaults
	// [ingress.DefaultPingInterval] and [ingress.DefaultPingMisses].
	WSPingInterval time.Duration
	WSPingMisses   int
	// WSOrigins (--ws-origins) are the origin patterns allowed to open a
	// WebSocket besides the same origin. Default none.
	WSOrigins []string
	// SSEHeartbeat (--sse-heartbeat) is the interval of an SSE stream's
	// keep-alive lines. Default [ingress.DefaultSSEHeartbeat].
	SSEHeartbeat time.Duration

	// DefaultTimeout (--default-timeout) and MaxTimeout (--max-timeout)
	// are a call's deadline when nothing shorter is asked and the longest
	// any call gets. Defaults [aggregator.DefaultTimeout] and
	// [aggregator.DefaultMaxTimeout].
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// BatchConcurrency (--batch-concurrency) bounds the calls of one batch
	// in flight. Default [aggregator.DefaultBatchConcurrency].
	BatchConcurrency int
	// MaxInFlight (--max-in-flight) bounds the calls in flight on the
	// ingress. Default [aggregator.DefaultMaxInFlight].
	MaxInFlight int
	// CallerMaxInFlight (--caller-max-in-flight) bounds them for one
	// authenticated caller; 0 for half of MaxInFlight. Default 0.
	CallerMaxInFlight int
	// MethodMaxInFlight (--method-max-in-flight) caps methods' calls in
	// flight, each entry method=n. Default none.
	MethodMaxInFlight []string
	// RateLimit (--rate-limit) is a caller's calls a second, with bursts
	// of RateBurst (--rate-burst); 0 for no limit. Defaults 0 and 100.
	RateLimit float64
	RateBurst int

	// Fair (--fair) shares the ingress among callers rather than requests
	// ([ingress.Fairness]). Default true.
	Fair bool
	// FairSeats (--fair-seats), FairHoldMin (--fair-hold-min), FairHoldMax
	// (--fair-hold-max), FairCPUTarget (--fair-cpu-target) and FairRound
	// (--fair-round) shape the window of seats. Defaults
	// [fair.DefaultSeats], [fair.DefaultHoldMin], [fair.DefaultHoldMax],
	// [fair.DefaultCPUTarget] and [fair.DefaultRound]; a FairRound below 0
	// sets no bound on a round.
	FairSeats     int
	FairHoldMin   time.Duration
	FairHoldMax   time.Duration
	FairCPUTarget float64
	FairRound     int
	// CallerMaxQueued (--caller-max-queued) bounds one caller's queue for a
	// seat; 0 for MaxInFlight. Default 0.
	CallerMaxQueued int

	// Heartbeat (--heartbeat) and HeartbeatMisses (--heartbeat-misses) are
	// the workers' heartbeat of a running call and how many missed ones
	// lose it. Defaults [aggregator.DefaultHeartbeat] and
	// [aggregator.DefaultHeartbeatMisses].
	Heartbeat       time.Duration
	HeartbeatMisses int
	// AckTimeout (--ack-timeout) is how long a retry-safe call may go
	// unacknowledged before it is published again; AckDelay (--ack-delay)
	// how long a worker may hold its ack back. Defaults
	// [aggregator.DefaultAckTimeout] and [aggregator.DefaultAckDelay].
	AckTimeout time.Duration
	AckDelay   time.Duration
	// RetrySafe (--retry-safe) are the method patterns safe to run twice.
	// Default none.
	RetrySafe []string
	// MaxAttempts (--max-attempts) bounds the publications of a
	// retry-safe call. Default [aggregator.DefaultMaxAttempts].
	MaxAttempts int
	// BusyWait (--busy-wait) is how long a call refused by busy workers is
	// retried. Default [aggregator.DefaultBusyWait].
	BusyWait time.Duration
	// BreakerFailures (--breaker-failures) opens a method's circuit after
	// that many failures in a row, 0 for no breaker; BreakerOpenFor
	// (--breaker-open-for) and BreakerTrials (--breaker-trials) are as in
	// [aggregator.Breaker]. Defaults 0, [aggregator.DefaultBreakerOpenFor]
	// and [aggregator.DefaultBreakerTrials].
	BreakerFailures int
	BreakerOpenFor  time.Duration
	BreakerTrials   int
	// Hedge (--hedge) publishes a retry-safe call again after that long
	// without a reply; 0 for never. Default 0.
	Hedge time.Duration

	// Auth is who may call, and what.
	Auth AuthConfig
	// Idempotency is how Idempotency-Key headers are honoured.
	Idempotency IdempotencyConfig
	// Jobs is the jobs service and runner.
	Jobs JobsConfig
	// A2A is the A2A front door.
	A2A A2AConfig

	// Discovery (--discovery) keeps a registry of the announced tools.
	// Default true.
	Discovery bool
	// ValidateParams (--validate) checks params against the announced
	// schemas (with Discovery). Default true.
	ValidateParams bool
	// ToolsRetention (--tools-retention) is how long a tool stays known
	// after its last worker was seen. Default [discovery.DefaultRetention].
	ToolsRetention time.Duration

	// Metrics (--metrics) serves Prometheus metrics at /metrics; Default
	// true. MetricsCallers (--metrics-callers) names each caller in the
	// fairness series; default false.
	Metrics        bool
	MetricsCallers bool
	// GCHeadroom (--gc-headroom) is how many bytes above the live heap
	// the collector's heap goal stays at least, while the gateway runs,
	// so that a small heap is not collected a hundred times a second
	// (internal/heapgoal; GOGC or GOMEMLIMIT in the environment win);
	// 0 for the runtime's own pace. Default [DefaultGCHeadroom].
	GCHeadroom int64
	// Dashboard (--dashboard) serves the dashboard at /ui/. Default true.
	Dashboard bool
	// MessageLog (--message-log, --message-log-max-bytes,
	// --message-log-redact) is what the message log writes. Default no
	// methods, [msglog.DefaultMaxBytes] and [DefaultRedact].
	MessageLog msglog.Config
	// Tracing is where the process's spans go.
	Tracing TracingConfig

	// Local, when set, takes the calls a worker of the same process can
	// run at once, without the bus (`toolbus dev --local-calls`). Default
	// nil.
	Local aggregator.Local
}

// AuthConfig is how an ingress authenticates its callers.
type AuthConfig struct {
	// Mode (--auth) is "on" or "off". Default "on" ("off" in `toolbus
	// dev`).
	Mode string
	// File (--auth-file) is the JSON file of API keys ([authfile.File]).
	// Default none.
	File string
	// JWTSecretFile (--jwt-secret-file) holds the HS256 secret and
	// JWKSFile (--jwt-jwks-file) the public keys of bearer JWTs. Default
	// none.
	JWTSecretFile string
	JWKSFile      string
	// JWTIssuer (--jwt-issuer) and JWTAudience (--jwt-audience) are the
	// required iss and aud. Default none.
	JWTIssuer   string
	JWTAudience string
	// JWTLeeway (--jwt-leeway) is the clock skew tolerated. Default
	// [auth.DefaultJWTLeeway].
	JWTLeeway time.Duration
	// JWTCallerClaim (--jwt-caller-claim), JWTRolesClaim
	// (--jwt-roles-claim) and JWTWeightClaim (--jwt-weight-claim) name the
	// claims of the caller, its roles and its weight. Defaults "sub",
	// "roles" and [auth.DefaultWeightClaim].
	JWTCallerClaim string
	JWTRolesClaim  string
	JWTWeightClaim string
	// JWTOperatorRole (--jwt-operator-role) and JWTExemptRole
	// (--jwt-exempt-role) are the roles of operators and of callers
	// exempt from the queues. Default none.
	JWTOperatorRole string
	JWTExemptRole   string
}

// IdempotencyConfig is how a gateway honours Idempotency-Key headers.
type IdempotencyConfig struct {
	// On (--idempotency) keeps records in JetStream. Default true.
	On bool
	// TTL (--idempotency-ttl) is how long an answer is replayed, MaxBytes
	// (--idempotency-max-bytes) the bucket's cap. Defaults
	// [aggregator.DefaultIdempotencyTTL] and
	// [aggregator.DefaultIdempotencyMaxBytes].
	TTL      time.Duration
	MaxBytes int64
	// CallerMaxRecords (--idempotency-caller-max-records) and
	// CallerMaxBytes (--idempotency-caller-max-bytes) bound one caller's
	// records. Defaults [aggregator.DefaultIdempotencyCallerMaxRecords]
	// and [aggregator.DefaultIdempotencyCallerMaxBytes].
	CallerMaxRecords int
	CallerMaxBytes   int64
	// FailOpen (--idempotency-fail-open) runs a call without its record
	// when the store cannot record it. Default false.
	FailOpen bool
}

// JobsConfig is a gateway's jobs service and job runner ([withJobs]).
type JobsConfig struct {
	// On (--jobs) serves rpc.jobs.* and runs the queued jobs. Default
	// true.
	On bool
	// Lease (--job-lease) and Concurrency (--job-concurrency) are the
	// runner's. Defaults [jobs.DefaultLease] and
	// [jobs.DefaultRunConcurrency].
	Lease       time.Duration
	Concurrency int
	// MaxRunTime (--job-max-run-time) bounds one run of a job, and is the
	// deadline of its call: a run past it is canceled and the job fails
	// -32001. Default [jobs.DefaultMaxRunTime].
	MaxRunTime time.Duration
	// ProgressInterval (--job-progress-interval) is how often at most a
	// running job's progress is written to its record. Default
	// [jobs.DefaultProgressInterval].
	ProgressInterval time.Duration
	// WaitBackoff (--job-wait-backoff) and MaxWaitBackoff
	// (--job-max-wait-backoff) are how long a job that found no worker
	// waits before it is offered again: the first wait, doubled at each
	// offer up to the second. Defaults [jobs.DefaultWaitBackoff] and
	// [jobs.DefaultMaxWaitBackoff].
	WaitBackoff    time.Duration
	MaxWaitBackoff time.Duration
	// TTL (--job-ttl) is how long a finished record is kept. Default
	// [jobs.DefaultTTL].
	TTL time.Duration
	// Replicas (--job-replicas) are the JetStream replicas of the jobs,
	// idempotency and tools stores, 1 to 5. Default [jobs.DefaultReplicas].
	Replicas int
	// MaxAttempts (--job-max-attempts) bounds a job's runs. Default
	// [jobs.DefaultMaxAttempts].
	MaxAttempts int
	// CallerMaxQueued (--job-caller-max-queued) bounds one caller's jobs
	// not final. Default [jobs.DefaultCallerMaxQueued].
	CallerMaxQueued int64
	// MaxSubscriptions (--job-max-subscriptions) and
	// CallerMaxSubscriptions (--job-caller-max-subscriptions) bound the
	// jobs followed at once. Defaults [jobs.DefaultMaxSubscriptions] and
	// [jobs.DefaultCallerMaxSubscriptions].
	MaxSubscriptions       int
	CallerMaxSubscriptions int
	// QueueMaxBytes (--job-queue-max-bytes) and RecordsMaxBytes
	// (--job-records-max-bytes) cap the stream and the bucket. Defaults
	// [jobs.DefaultQueueMaxBytes] and [jobs.DefaultRecordsMaxBytes].
	QueueMaxBytes   int64
	RecordsMaxBytes int64
	// CallbackSecret (--callback-secret) signs completion callbacks;
	// without it notify_url is refused. Default none.
	CallbackSecret string
	// CallbackAllow (--callback-allow) are the internal receivers that
	// callbacks and A2A push notifications may reach. Default none.
	CallbackAllow []string
}

// A2AConfig is a gateway's A2A front door ([withA2A]).
type A2AConfig struct {
	// On (--a2a) serves POST /a2a and the agent card (with Jobs.On).
	// Default true.
	On bool
	// TextMethod (--a2a-text-method) is the method a message of text alone
	// goes to. Default none: such a message is refused.
	TextMethod string
	// PublicSkills (--a2a-public-skills) are the method patterns the
	// public card lists while authentication is on. Default none.
	PublicSkills []string
	// PushCallerMaxConfigs (--a2a-push-caller-max-configs) and
	// PushCallerMaxBytes (--a2a-push-caller-max-bytes) bound one caller's
	// push configs. Defaults [a2a.DefaultPushCallerMaxConfigs] and
	// [a2a.DefaultPushCallerMaxBytes].
	PushCallerMaxConfigs int
	PushCallerMaxBytes   int64
}

// DefaultRedact are the members the message log hides unless told
// otherwise.
var DefaultRedact = []string{"password", "passwd", "secret", "token", "access_token", "refresh_token", "api_key", "apikey", "authorization", "cookie"}

// DefaultGCHeadroom is the heap goal's headroom of a gateway or a
// worker: with it, a process whose live heap is a few MiB collects about
// a quarter as often under load as with the runtime's own pace, for at
// most this much more memory (BENCHMARKS.md, "A heap goal with
// headroom").
const DefaultGCHeadroom = 16 << 20

// DefaultGatewayConfig returns the settings of `toolbus ingress` without
// flags.
func DefaultGatewayConfig() GatewayConfig {
	return GatewayConfig{
		Listen:           "0.0.0.0:8080",
		Prefix:           bus.DefaultPrefix,
		ShutdownTimeout:  30 * time.Second,
		Version:          BuildVersion(),
		GCHeadroom:       DefaultGCHeadroom,
		Limits:           ingress.Limits{MaxBodyBytes: ingress.DefaultMaxBodyBytes, MaxBatchItems: ingress.DefaultMaxBatchItems, MaxDepth: ingress.DefaultMaxDepth},
		MaxHeaderBytes:   ingress.DefaultMaxHeaderBytes,
		MaxConnsPerAddr:  ingress.DefaultMaxConnsPerAddr,
		MaxBytesInFlight: ingress.DefaultMaxBytesInFlight,
		WSMaxInFlight:    ingress.DefaultWebSocketMaxInFlight,
		WSMaxUnsentBytes: ingress.DefaultWebSocketMaxUnsentBytes,
		WSWriteTimeout:   ingress.DefaultWebSocketWriteTimeout,
		WSPingInterval:   ingress.DefaultPingInterval,
		WSPingMisses:     ingress.DefaultPingMisses,
		SSEHeartbeat:     ingress.DefaultSSEHeartbeat,
		DefaultTimeout:   aggregator.DefaultTimeout,
		MaxTimeout:       aggregator.DefaultMaxTimeout,
		BatchConcurrency: aggregator.DefaultBatchConcurrency,
		MaxInFlight:      aggregator.DefaultMaxInFlight,
		RateBurst:        100,
		Fair:             true,
		FairSeats:        fair.DefaultSeats,
		FairHoldMin:      fair.DefaultHoldMin,
		FairHoldMax:      fair.DefaultHoldMax,
		FairCPUTarget:    fair.DefaultCPUTarget,
		FairRound:        fair.DefaultRound,
		Heartbeat:        aggregator.DefaultHeartbeat,
		HeartbeatMisses:  aggregator.DefaultHeartbeatMisses,
		AckTimeout:       aggregator.DefaultAckTimeout,
		AckDelay:         aggregator.DefaultAckDelay,
		MaxAttempts:      aggregator.DefaultMaxAttempts,
		BusyWait:         aggregator.DefaultBusyWait,
		BreakerOpenFor:   aggregator.DefaultBreakerOpenFor,
		BreakerTrials:    aggregator.DefaultBreakerTrials,
		Auth: AuthConfig{Mode: "on", JWTLeeway: auth.DefaultJWTLeeway, JWTCallerClaim: "sub", JWTRolesClaim: "roles",
			JWTWeightClaim: auth.DefaultWeightClaim},
		Idempotency: IdempotencyConfig{On: true, TTL: aggregator.DefaultIdempotencyTTL, MaxBytes: aggregator.DefaultIdempotencyMaxBytes,
			CallerMaxRecords: aggregator.DefaultIdempotencyCallerMaxRecords, CallerMaxBytes: aggregator.DefaultIdempotencyCallerMaxBytes},
		Jobs: JobsConfig{On: true, Lease: jobs.DefaultLease, Concurrency: jobs.DefaultRunConcurrency, MaxRunTime: jobs.DefaultMaxRunTime,
			ProgressInterval: jobs.DefaultProgressInterval, WaitBackoff: jobs.DefaultWaitBackoff, MaxWaitBackoff: jobs.DefaultMaxWaitBackoff, TTL: jobs.DefaultTTL,
			Replicas: jobs.DefaultReplicas, MaxAttempts: jobs.DefaultMaxAttempts, CallerMaxQueued: jobs.DefaultCallerMaxQueued,
			MaxSubscriptions: jobs.DefaultMaxSubscriptions, CallerMaxSubscriptions: jobs.DefaultCallerMaxSubscriptions,
			QueueMaxBytes: jobs.DefaultQueueMaxBytes, RecordsMaxBytes: jobs.DefaultRecordsMaxBytes},
		A2A:            A2AConfig{On: true, PushCallerMaxConfigs: a2a.DefaultPushCallerMaxConfigs, PushCallerMaxBytes: a2a.DefaultPushCallerMaxBytes},
		Discovery:      true,
		ValidateParams: true,
		ToolsRetention: discovery.DefaultRetention,
		Metrics:        true,
		Dashboard:      true,
		MessageLog:     msglog.Config{MaxBytes: msglog.DefaultMaxBytes, Redact: DefaultRedact},
		Tracing:        DefaultTracingConfig(),
	}
}

// ErrNoAuth means authentication is on but nothing to authenticate with
// was configured.
var ErrNoAuth = errors.New("authentication is on but not configured: give --auth-file or --jwt-secret-file/--jwt-jwks-file, or --auth=off to run without it")

// Validate checks c before anything connects or starts, so that a mistake
// is reported as such, naming its flag, and nothing is left running. It
// reads the files of the authentication settings.
func (c GatewayConfig) Validate() error {
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	if err := c.MessageLog.Validate(); err != nil {
		return fmt.Errorf("--message-log: %w", err)
	}
	if _, err := c.Auth.Load(); err != nil {
		return err
	}
	caps, err := c.methodCaps()
	if err != nil {
		return err
	}
	if _, err := egress.New(egress.WithAllow(c.Jobs.CallbackAllow...)); err != nil {
		return fmt.Errorf("--callback-allow: %w", err)
	}
	if err := c.Jobs.Validate(); err != nil {
		return err
	}
	// What the parts refuse, asked of them before they are made, under
	// the flags it comes from.
	if err := check(c.aggregatorOptions(caps), aggregator.CheckOptions); err != nil {
		return err
	}
	if err := check(c.ingressOptions(), ingress.CheckOptions); err != nil {
		return err
	}
	return check(c.gatewayOptions(), checkGatewayOptions)
}

// Load returns the [auth.Config] of c, reading the files it names: the
// keys of File and the secret of JWTSecretFile. It returns a zero config
// when authentication is off, and [ErrNoAuth] when it is on with nothing
// to authenticate with.
func (c AuthConfig) Load() (auth.Config, error) {
	var a auth.Config
	switch c.Mode {
	case "off":
		return a, nil
	case "on":
	default:
		return a, fmt.Errorf("--auth %q is neither on nor off: give --auth=on with --auth-file or --jwt-secret-file/--jwt-jwks-file, or --auth=off", c.Mode)
	}
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return a, fmt.Errorf("--auth-file: %w", err)
		}
		var f authfile.File
		var shares authFileShares
		if err := errors.Join(json.Unmarshal(b, &f), json.Unmarshal(b, &shares)); err != nil {
			return a, fmt.Errorf("--auth-file %s: %w", c.File, err)
		}
		for i, k := range f.Keys {
			s := shares.Keys[i]
			a.Keys = append(a.Keys, auth.APIKey{Name: k.Name, SHA256: k.SHA256, Allow: k.Allow, Operator: k.Operator,
				Weight: s.Weight, Exempt: s.Exempt})
		}
		a.Allow, a.DefaultAllow = f.Allow, f.DefaultAllow
	}
	if c.JWTSecretFile != "" || c.JWKSFile != "" {
		j := &auth.JWT{JWKSFile: c.JWKSFile, Issuer: c.JWTIssuer, Audience: c.JWTAudience,
			Leeway: c.JWTLeeway, CallerClaim: c.JWTCallerClaim, RolesClaim: c.JWTRolesClaim, OperatorRole: c.JWTOperatorRole,
			WeightClaim: c.JWTWeightClaim, ExemptRole: c.JWTExemptRole}
		if c.JWTSecretFile != "" {
			b, err := os.ReadFile(c.JWTSecretFile)
			if err != nil {
				return a, fmt.Errorf("--jwt-secret-file: %w", err)
			}
			j.Secret = []byte(strings.TrimSpace(string(b)))
		}
		a.JWT = j
	}
	if len(a.Keys) == 0 && a.JWT == nil {
		return a, ErrNoAuth
	}
	return a, nil
}

// authFileShares are the members of each key of --auth-file that set its
// caller's share of the ingress, read beside [authfile.File]: "weight" (1
// when absent) and "exempt".
type authFileShares struct {
	Keys []struct {
		Weight float64 `json:"weight"`
		Exempt bool    `json:"exempt"`
	} `json:"keys"`
}

// methodCaps reads the method=n pairs of MethodMaxInFlight.
func (c GatewayConfig) methodCaps() (map[string]int, error) {
	caps := map[string]int{}
	for _, p := range c.MethodMaxInFlight {
		m, v, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(v)
		if !ok || m == "" || err != nil || n <= 0 {
			return nil, fmt.Errorf("--method-max-in-flight: %q is not method=n with n positive", p)
		}
		caps[m] = n
	}
	return caps, nil
}

// WorkerConfig is everything a worker process is built from: its
// toolsets, the servers of other protocols it bridges, and how it serves.
// Each field names, in parentheses, the flag of `toolbus worker` (and of
// `toolbus dev` but MetricsListen and Prefix, which dev takes from its
// gateway) that sets it ([WorkerFlags]), and its default, which
// [DefaultWorkerConfig] holds. The zero value is not usable.
type WorkerConfig struct {
	// Prefix (--prefix) is the NATS subject prefix of the cluster.
	// Default [bus.DefaultPrefix].
	Prefix string
	// Version is the version the status service reports. Default the
	// binary's ([BuildVersion]).
	Version string
	// Tools (--tools) are the toolsets served: demo, conform. Default
	// demo.
	Tools []string
	// Concurrency (--concurrency) bounds the calls of one method running
	// at once. Default [worker.DefaultConcurrency].
	Concurrency int
	// ShutdownTimeout (--drain-timeout) is how long a shutdown drains the
	// calls held. Default 30s.
	ShutdownTimeout time.Duration
	// Announce (--announce) announces the tools for discovery. Default
	// true.
	Announce bool
	// FetchAllow (--fetch-allow) are the internal addresses the demo tool
	// fetch_page may reach. Default none.
	FetchAllow []string
	// MetricsListen (--metrics-listen) is where a standalone worker serves
	// /metrics, /healthz and /readyz; empty for nowhere. Default
	// "0.0.0.0:9464" (none in `toolbus dev`, whose ingress serves them).
	MetricsListen string
	// GCHeadroom (--gc-headroom) is [GatewayConfig.GCHeadroom] for a
	// standalone worker; 0 in `toolbus dev`, whose gateway keeps the
	// process's. Default [DefaultGCHeadroom].
	GCHeadroom int64
	// MCP is the MCP server whose tools the worker serves, if any.
	MCP MCPBridgeConfig
	// A2A is the A2A agent whose skills the worker serves, if any.
	A2A A2ABridgeConfig
	// Tracing is where the process's spans go.
	Tracing TracingConfig
}

// MCPBridgeConfig is the MCP server a worker bridges: one command or one
// URL.
type MCPBridgeConfig struct {
	// Command (--mcp-command) starts the server over stdio ("CMD ARGS",
	// split at spaces). Default none.
	Command string
	// URL (--mcp-url) is the server's Streamable HTTP URL. Default none.
	URL string
	// Prefix (--mcp-prefix) goes, with a dot, before the bridged tools'
	// method names. Default none.
	Prefix string
}

// A2ABridgeConfig is the A2A agent a worker bridges.
type A2ABridgeConfig struct {
	// URL (--a2a-url) is the agent's base URL or card URL. Default none.
	URL string
	// Prefix (--a2a-prefix) goes, with a dot, before the bridged skills'
	// method names. Default none.
	Prefix string
	// Token (--a2a-token) is a bearer token, APIKey (--a2a-api-key) an API
	// key sent in APIKeyHeader (--a2a-api-key-header). Defaults none and
	// [a2abridge.DefaultAPIKeyHeader].
	Token        string
	APIKey       string
	APIKeyHeader string
	// CardRefresh (--a2a-card-refresh) is how often the card is read
	// again. Default [a2abridge.DefaultCardRefresh].
	CardRefresh time.Duration
}

// DefaultWorkerConfig returns the settings of `toolbus worker` without
// flags.
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{
		Prefix:          bus.DefaultPrefix,
		Version:         BuildVersion(),
		Tools:           []string{"demo"},
		Concurrency:     worker.DefaultConcurrency,
		ShutdownTimeout: 30 * time.Second,
		Announce:        true,
		MetricsListen:   "0.0.0.0:9464",
		GCHeadroom:      DefaultGCHeadroom,
		A2A:             A2ABridgeConfig{APIKeyHeader: a2abridge.DefaultAPIKeyHeader, CardRefresh: a2abridge.DefaultCardRefresh},
		Tracing:         DefaultTracingConfig(),
	}
}

// Validate checks c before anything connects or starts, so that a typo is
// reported as such, naming its flag, even when NATS is unreachable, and
// nothing is left running after it.
func (c WorkerConfig) Validate() error {
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	if c.MCP.Command != "" && c.MCP.URL != "" {
		return errors.New("worker: --mcp-command and --mcp-url both name the MCP server: give one of them")
	}
	if c.MCP.Prefix != "" && c.MCP.Command == "" && c.MCP.URL == "" {
		return errors.New("worker: --mcp-prefix names the tools of no server: give --mcp-command or --mcp-url with it, or drop it")
	}
	if c.A2A.URL == "" && (c.A2A.Prefix != "" || c.A2A.Token != "" || c.A2A.APIKey != "") {
		return errors.New("worker: --a2a-prefix, --a2a-token and --a2a-api-key are for an agent: give --a2a-url with them, or drop them")
	}
	if c.A2A.Token != "" && c.A2A.APIKey != "" {
		return errors.New("worker: --a2a-token and --a2a-api-key both authenticate to the agent: give one of them")
	}
	if len(c.Tools) == 0 && c.MCP.Command == "" && c.MCP.URL == "" && c.A2A.URL == "" {
		return errors.New("worker: nothing to serve: give --tools, --mcp-command, --mcp-url or --a2a-url")
	}
	for _, name := range c.Tools {
		if _, ok := toolsets[name]; !ok {
			return fmt.Errorf("worker: --tools names the unknown toolset %q: choose among demo and conform", name)
		}
	}
	if _, err := egress.New(egress.WithAllow(c.FetchAllow...)); err != nil {
		return fmt.Errorf("--fetch-allow: %w", err)
	}
	if err := check([]flagged[worker.Option]{{"--concurrency", worker.WithConcurrency(c.Concurrency)}}, worker.CheckOptions); err != nil {
		return err
	}
	if err := check([]flagged[WorkerOption]{{"--gc-headroom", withGCHeadroom(c.GCHeadroom)}}, checkWorkerOptions); err != nil {
		return err
	}
	if c.A2A.URL != "" {
		if err := a2abridge.CheckOptions(c.A2A.URL); err != nil {
			return fmt.Errorf("--a2a-url: %w", err)
		}
		return check(c.A2A.options(), func(opts ...a2abridge.Option) error { return a2abridge.CheckOptions(c.A2A.URL, opts...) })
	}
	return nil
}

// BuildVersion is the version of the binary as Go recorded it: the module
// version of a `go install ...@version`, "dev" for a build from a
// checkout.
func BuildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
