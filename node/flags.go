package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/bus"
)

// Flag binds one field of a config C to its command-line flag: its name
// and its help text. The flag's default is the field's value when it is
// bound ([Bind]), the config's Default… constructor's unless a command
// changes it first; its environment variable follows from its name
// (TOOLBUS_ and the name in capitals, - as _), which the command's root
// gives every flag. A new setting is a field of its config, with its
// default there and its check in the config's Validate, and a row here.
type Flag[C any] struct {
	Name  string
	Usage string
	// Field returns a pointer to the field in c: a *string, *bool, *int,
	// *int64, *float64, *time.Duration or *[]string.
	Field func(c *C) any
}

// Bind defines flags on fs, each setting its field of c, with the field's
// value now as its default. It panics on a field of a type [Flag] does
// not list: a table's mistake, which its test catches.
func Bind[C any](fs *pflag.FlagSet, c *C, flags []Flag[C]) {
	for _, f := range flags {
		switch p := f.Field(c).(type) {
		case *string:
			fs.StringVar(p, f.Name, *p, f.Usage)
		case *bool:
			fs.BoolVar(p, f.Name, *p, f.Usage)
		case *int:
			fs.IntVar(p, f.Name, *p, f.Usage)
		case *int64:
			fs.Int64Var(p, f.Name, *p, f.Usage)
		case *float64:
			fs.Float64Var(p, f.Name, *p, f.Usage)
		case *time.Duration:
			fs.DurationVar(p, f.Name, *p, f.Usage)
		case *[]string:
			fs.StringSliceVar(p, f.Name, *p, f.Usage)
		default:
			panic(fmt.Sprintf("node: flag --%s binds a field of type %T, which Bind does not know", f.Name, p))
		}
	}
}

// GatewayFlags are the flags of a [GatewayConfig], those of `toolbus
// ingress` and of the ingress of `toolbus dev`.
var GatewayFlags = []Flag[GatewayConfig]{
	{"listen", "HTTP listen address of the ingress (port 0 picks a free port)", func(c *GatewayConfig) any { return &c.Listen }},
	{"prefix", "NATS subject prefix of the cluster", func(c *GatewayConfig) any { return &c.Prefix }},
	{"max-body-bytes", "largest request body in bytes", func(c *GatewayConfig) any { return &c.Limits.MaxBodyBytes }},
	{"max-batch-items", "most calls in one batch", func(c *GatewayConfig) any { return &c.Limits.MaxBatchItems }},
	{"max-depth", "deepest JSON nesting of a request body", func(c *GatewayConfig) any { return &c.Limits.MaxDepth }},
	{"default-timeout", "deadline of a call when nothing shorter is asked", func(c *GatewayConfig) any { return &c.DefaultTimeout }},
	{"max-timeout", "longest deadline any call may get", func(c *GatewayConfig) any { return &c.MaxTimeout }},
	{"batch-concurrency", "calls of one batch in flight at once", func(c *GatewayConfig) any { return &c.BatchConcurrency }},
	{"max-in-flight", "calls in flight on this ingress; more are refused with -32002", func(c *GatewayConfig) any { return &c.MaxInFlight }},
	{"caller-max-in-flight", "calls in flight on this ingress for one authenticated caller (0: half of --max-in-flight); without auth the one anonymous caller may use all of --max-in-flight", func(c *GatewayConfig) any { return &c.CallerMaxInFlight }},
	{"fair", "share the ingress among callers rather than requests: per-caller queues and a fair scheduler admit calls into a window of seats (false: calls are served in arrival order)", func(c *GatewayConfig) any { return &c.Fair }},
	{"fair-seats", "calls the ingress works on at once; the callers with calls waiting share them in proportion to their weights", func(c *GatewayConfig) any { return &c.FairSeats }},
	{"fair-hold-min", "shortest time a call keeps its seat without an answer before it counts as waiting on a worker and leaves its seat to the next (the hold adapts to how long calls take, up to --fair-hold-max)", func(c *GatewayConfig) any { return &c.FairHoldMin }},
	{"fair-hold-max", "longest time a call keeps its seat without an answer", func(c *GatewayConfig) any { return &c.FairHoldMax }},
	{"fair-cpu-target", "share of the ingress's CPUs that admitted calls may take while more than one caller is busy; below 1, calls are admitted at a pace above it, so that the ingress stays idle often enough to read every caller's next request (1: no pacing; 0.85 paces a saturated ingress)", func(c *GatewayConfig) any { return &c.FairCPUTarget }},
	{"fair-round", "calls admitted between two reads of the ingress's connections while more than one caller is busy, so that a busy ingress reads every caller's next request at least once a round: smaller rounds answer a lone caller sooner under another's flood and cost the flood more (-1: no bound)", func(c *GatewayConfig) any { return &c.FairRound }},
	{"caller-max-queued", "calls one caller may have waiting for a seat on this ingress, a call counting once more per 16 KiB of params (0: as many as --max-in-flight); more are refused -32002", func(c *GatewayConfig) any { return &c.CallerMaxQueued }},
	{"shutdown-timeout", "how long shutdown waits for calls in flight", func(c *GatewayConfig) any { return &c.ShutdownTimeout }},
	{"jsonrpc1", "answer requests without a jsonrpc member in JSON-RPC 1.0 form", func(c *GatewayConfig) any { return &c.JSONRPC1 }},
	{"access-log", "log a line per HTTP request and per call at level info (default: at level debug, so nothing is logged per call at the default level)", func(c *GatewayConfig) any { return &c.AccessLog }},
	{"max-header-bytes", "largest request line and headers in bytes (431 beyond)", func(c *GatewayConfig) any { return &c.MaxHeaderBytes }},
	{"max-conns-per-addr", "connections one client IP address may have open (0: no bound, as behind a proxy)", func(c *GatewayConfig) any { return &c.MaxConnsPerAddr }},
	{"max-bytes-in-flight", "bytes of answers the ingress holds unwritten, over all callers", func(c *GatewayConfig) any { return &c.MaxBytesInFlight }},
	{"caller-max-bytes-in-flight", "bytes of answers the ingress holds unwritten for one authenticated caller (0: half of --max-bytes-in-flight)", func(c *GatewayConfig) any { return &c.CallerMaxBytesInFlight }},
	{"ws-max-in-flight", "calls in flight on one WebSocket connection", func(c *GatewayConfig) any { return &c.WSMaxInFlight }},
	{"ws-max-unsent-bytes", "bytes of answers a WebSocket client may leave unread before its connection is closed", func(c *GatewayConfig) any { return &c.WSMaxUnsentBytes }},
	{"ws-write-timeout", "how long writing one message to a WebSocket client may take before its connection is closed", func(c *GatewayConfig) any { return &c.WSWriteTimeout }},
	{"ws-ping-interval", "how often the server pings a WebSocket client", func(c *GatewayConfig) any { return &c.WSPingInterval }},
	{"ws-ping-misses", "unanswered pings after which a WebSocket connection is closed", func(c *GatewayConfig) any { return &c.WSPingMisses }},
	{"ws-origins", "origin patterns allowed to open a WebSocket besides the same origin (e.g. *.example.com)", func(c *GatewayConfig) any { return &c.WSOrigins }},
	{"sse-heartbeat", "interval of the comment lines that keep an SSE stream alive", func(c *GatewayConfig) any { return &c.SSEHeartbeat }},
	{"jobs", "serve the rpc.jobs.* methods on JetStream and run the queued jobs as calls to the workers (needs JetStream)", func(c *GatewayConfig) any { return &c.Jobs.On }},
	{"job-lease", "how long a job stays leased to this ingress's runner without a sign of life", func(c *GatewayConfig) any { return &c.Jobs.Lease }},
	{"job-concurrency", "jobs this ingress's runner sends to workers at once", func(c *GatewayConfig) any { return &c.Jobs.Concurrency }},
	{"job-max-run-time", "longest one run of a job may take, the deadline of its call; a run past it is canceled and the job fails -32001", func(c *GatewayConfig) any { return &c.Jobs.MaxRunTime }},
	{"job-progress-interval", "how often at most a running job's progress is written to its record (at least 10ms)", func(c *GatewayConfig) any { return &c.Jobs.ProgressInterval }},
	{"job-wait-backoff", "how long a job that found no worker waits before it is offered again, doubled at each offer up to --job-max-wait-backoff", func(c *GatewayConfig) any { return &c.Jobs.WaitBackoff }},
	{"job-max-wait-backoff", "longest wait of a job that found no worker before it is offered again", func(c *GatewayConfig) any { return &c.Jobs.MaxWaitBackoff }},
	{"job-ttl", "how long a finished job's record is kept", func(c *GatewayConfig) any { return &c.Jobs.TTL }},
	{"job-replicas", "JetStream replicas of the job stream and records (3 on a three-node cluster)", func(c *GatewayConfig) any { return &c.Jobs.Replicas }},
	{"job-max-attempts", "how many times a job may start running", func(c *GatewayConfig) any { return &c.Jobs.MaxAttempts }},
	{"job-caller-max-queued", "jobs one authenticated caller may have queued or running (without auth the anonymous caller is bounded by the queue alone)", func(c *GatewayConfig) any { return &c.Jobs.CallerMaxQueued }},
	{"job-max-subscriptions", "jobs followed at once on this ingress (WebSocket subscriptions, A2A streams and blocking sends, MCP calls with progress), over all callers and by the anonymous caller", func(c *GatewayConfig) any { return &c.Jobs.MaxSubscriptions }},
	{"job-caller-max-subscriptions", "jobs one authenticated caller may follow at once on this ingress (-32002, limit caller_max_subscriptions)", func(c *GatewayConfig) any { return &c.Jobs.CallerMaxSubscriptions }},
	{"job-queue-max-bytes", "byte cap of the JetStream stream of queued jobs", func(c *GatewayConfig) any { return &c.Jobs.QueueMaxBytes }},
	{"job-records-max-bytes", "byte cap of the JetStream bucket of job records", func(c *GatewayConfig) any { return &c.Jobs.RecordsMaxBytes }},
	{"callback-secret", "secret (16 bytes or more) that signs job completion callbacks; without it notify_url is refused", func(c *GatewayConfig) any { return &c.Jobs.CallbackSecret }},
	{"callback-allow", "internal receivers job callbacks may reach although loopback, private or link-local: CIDRs, addresses and host names, each with an optional :port (e.g. 10.0.0.0/8,hooks.internal:8443)", func(c *GatewayConfig) any { return &c.Jobs.CallbackAllow }},
	{"mcp-state-key", "secret (16 bytes or more) that signs the request state of an MCP tools/call that asks its client (MCP 2026-07-28 and later); give every ingress behind one address the same, so that the client's retry resumes the job on any of them (default: a random key per process)", func(c *GatewayConfig) any { return &c.MCPStateKey }},
	{"discovery", "keep a registry of the tools workers announce: rpc.discover, GET /openrpc.json, the MCP front door at /mcp, -32003 for known methods without workers", func(c *GatewayConfig) any { return &c.Discovery }},
	{"validate", "check params against the announced schemas before any worker runs, and at job submit (needs --discovery)", func(c *GatewayConfig) any { return &c.ValidateParams }},
	{"tools-retention", "how long a tool stays known after its last worker was seen, so that its jobs are still taken (kept in JetStream with --jobs)", func(c *GatewayConfig) any { return &c.ToolsRetention }},
	{"a2a", "serve the A2A front door at POST /a2a and its agent card at /.well-known/agent-card.json, tasks as jobs (needs --jobs); push notifications reach internal receivers only through --callback-allow", func(c *GatewayConfig) any { return &c.A2A.On }},
	{"a2a-text-method", `the method an A2A message of text alone goes to, with params {"text": "..."} (default: such a message is refused)`, func(c *GatewayConfig) any { return &c.A2A.TextMethod }},
	{"a2a-public-skills", "method patterns whose skills the public A2A agent card lists while authentication is on (e.g. echo,math.*); without auth it lists every skill", func(c *GatewayConfig) any { return &c.A2A.PublicSkills }},
	{"a2a-push-caller-max-configs", "A2A push notification configs one caller may keep over all its tasks not yet final, counted in JetStream across every ingress", func(c *GatewayConfig) any { return &c.A2A.PushCallerMaxConfigs }},
	{"a2a-push-caller-max-bytes", "bytes of the A2A push notification configs one caller may keep over all its tasks not yet final, counted in JetStream across every ingress", func(c *GatewayConfig) any { return &c.A2A.PushCallerMaxBytes }},
	{"auth", "authentication: on (needs --auth-file or --jwt-*) or off (every caller reaches every tool)", func(c *GatewayConfig) any { return &c.Auth.Mode }},
	{"auth-file", `JSON file of API keys and allowed methods: {"keys":[{"name","sha256","allow":["math.*"],"operator":false,"weight":1,"exempt":false}],"allow":{"caller":["pattern"]},"default_allow":[]}`, func(c *GatewayConfig) any { return &c.Auth.File }},
	{"jwt-secret-file", "file holding the HS256 secret of bearer JWTs", func(c *GatewayConfig) any { return &c.Auth.JWTSecretFile }},
	{"jwt-jwks-file", "JWKS file of the RS256/ES256 public keys of bearer JWTs", func(c *GatewayConfig) any { return &c.Auth.JWKSFile }},
	{"jwt-issuer", "required iss of bearer JWTs", func(c *GatewayConfig) any { return &c.Auth.JWTIssuer }},
	{"jwt-audience", "required aud of bearer JWTs", func(c *GatewayConfig) any { return &c.Auth.JWTAudience }},
	{"jwt-leeway", "clock skew tolerated on exp, nbf and iat", func(c *GatewayConfig) any { return &c.Auth.JWTLeeway }},
	{"jwt-caller-claim", "JWT claim naming the caller", func(c *GatewayConfig) any { return &c.Auth.JWTCallerClaim }},
	{"jwt-roles-claim", "JWT claim holding the caller's roles (an array, or a string of space-separated roles)", func(c *GatewayConfig) any { return &c.Auth.JWTRolesClaim }},
	{"jwt-operator-role", "role that makes a JWT caller an operator, who sees every caller's dashboard data (empty: no token does)", func(c *GatewayConfig) any { return &c.Auth.JWTOperatorRole }},
	{"jwt-weight-claim", "JWT claim holding the caller's weight, its share of the ingress while others are busy too (a number up to 1000; absent: 1)", func(c *GatewayConfig) any { return &c.Auth.JWTWeightClaim }},
	{"jwt-exempt-role", "role that exempts a JWT caller from the ingress's queues, for health checks and operators (empty: no token is)", func(c *GatewayConfig) any { return &c.Auth.JWTExemptRole }},
	{"rate-limit", "calls a second per caller, in a token bucket (0: no rate limit)", func(c *GatewayConfig) any { return &c.RateLimit }},
	{"rate-burst", "bursts of calls a caller's token bucket allows (with --rate-limit)", func(c *GatewayConfig) any { return &c.RateBurst }},
	{"method-max-in-flight", "per-method in-flight caps, method=n (e.g. fetch_page=64)", func(c *GatewayConfig) any { return &c.MethodMaxInFlight }},
	{"idempotency", "honour Idempotency-Key headers with records in JetStream (needs JetStream)", func(c *GatewayConfig) any { return &c.Idempotency.On }},
	{"idempotency-ttl", "how long a finished call's answer is replayed for its idempotency key", func(c *GatewayConfig) any { return &c.Idempotency.TTL }},
	{"idempotency-max-bytes", "byte cap of the JetStream bucket of idempotency records; once full, calls with Idempotency-Key are refused -32003", func(c *GatewayConfig) any { return &c.Idempotency.MaxBytes }},
	{"idempotency-caller-max-records", "idempotency records one authenticated caller may hold on this ingress", func(c *GatewayConfig) any { return &c.Idempotency.CallerMaxRecords }},
	{"idempotency-caller-max-bytes", "bytes of idempotency records one authenticated caller may hold on this ingress", func(c *GatewayConfig) any { return &c.Idempotency.CallerMaxBytes }},
	{"idempotency-fail-open", "run a call with Idempotency-Key without its record when the store cannot record it, instead of refusing it -32003 (a retry may then run it twice)", func(c *GatewayConfig) any { return &c.Idempotency.FailOpen }},
	{"heartbeat", "interval of the workers' heartbeats of a running call (0: off)", func(c *GatewayConfig) any { return &c.Heartbeat }},
	{"heartbeat-misses", "missed heartbeats after which a call's worker is lost, and unheard heartbeats after which a worker cancels a call of a vanished ingress", func(c *GatewayConfig) any { return &c.HeartbeatMisses }},
	{"ack-timeout", "how long a retry-safe call may go unacknowledged before it is published again", func(c *GatewayConfig) any { return &c.AckTimeout }},
	{"ack-delay", "how long a worker may hold back the ack of a call of a method whose workers were seen to acknowledge, so that a call answered sooner costs one bus message less; a call silent for the delay and the heartbeat misses is lost (0: an ack at once); at most half the ack timeout and half the heartbeat", func(c *GatewayConfig) any { return &c.AckDelay }},
	{"retry-safe", "method patterns safe to run twice: retried on a lost worker, hedged (e.g. search.>,fetch_page)", func(c *GatewayConfig) any { return &c.RetrySafe }},
	{"max-attempts", "most publications of a retry-safe call", func(c *GatewayConfig) any { return &c.MaxAttempts }},
	{"busy-wait", "how long a call refused by busy workers is retried before -32002", func(c *GatewayConfig) any { return &c.BusyWait }},
	{"breaker-failures", "failures in a row that open a method's circuit (0: no circuit breaker)", func(c *GatewayConfig) any { return &c.BreakerFailures }},
	{"breaker-open-for", "how long an open circuit refuses calls before a trial", func(c *GatewayConfig) any { return &c.BreakerOpenFor }},
	{"breaker-trials", "trial calls of a half-open circuit", func(c *GatewayConfig) any { return &c.BreakerTrials }},
	{"hedge", "publish a retry-safe call again when it has no reply after this long (0: no hedging)", func(c *GatewayConfig) any { return &c.Hedge }},
	{"metrics", "serve Prometheus metrics at GET /metrics (open without credentials, like the probes)", func(c *GatewayConfig) any { return &c.Metrics }},
	{"gc-headroom", gcHeadroomUsage, func(c *GatewayConfig) any { return &c.GCHeadroom }},
	{"metrics-callers", "name each caller in the toolbus_fair_* series of /metrics, rather than count them together as _all", func(c *GatewayConfig) any { return &c.MetricsCallers }},
	{"dashboard", "serve the live dashboard at /ui/ (its data needs credentials when auth is on)", func(c *GatewayConfig) any { return &c.Dashboard }},
	{"message-log", `log the request and response bodies of these methods or patterns ("math.*", ">" for all); off when empty`, func(c *GatewayConfig) any { return &c.MessageLog.Methods }},
	{"message-log-max-bytes", "longest body a message log line holds; longer ones are cut and marked truncated", func(c *GatewayConfig) any { return &c.MessageLog.MaxBytes }},
	{"message-log-redact", "object members whose values the message log replaces with [REDACTED], at any depth, ignoring case", func(c *GatewayConfig) any { return &c.MessageLog.Redact }},
}

// WorkerFlags are the flags of a [WorkerConfig] that `toolbus worker` and
// `toolbus dev` share.
var WorkerFlags = []Flag[WorkerConfig]{
	{"tools", "toolsets to serve (available: demo, conform)", func(c *WorkerConfig) any { return &c.Tools }},
	{"concurrency", "calls of one method a worker runs at once", func(c *WorkerConfig) any { return &c.Concurrency }},
	{"drain-timeout", "how long a worker drains its calls on shutdown", func(c *WorkerConfig) any { return &c.ShutdownTimeout }},
	{"announce", "announce the worker's tools and their schemas for discovery", func(c *WorkerConfig) any { return &c.Announce }},
	{"mcp-command", `serve the tools of the MCP server this command starts, over stdio ("CMD ARGS", split at spaces)`, func(c *WorkerConfig) any { return &c.MCP.Command }},
	{"mcp-url", "serve the tools of the MCP server at this Streamable HTTP URL", func(c *WorkerConfig) any { return &c.MCP.URL }},
	{"mcp-prefix", "put this prefix and a dot before the bridged MCP tools' method names", func(c *WorkerConfig) any { return &c.MCP.Prefix }},
	{"fetch-allow", "internal addresses the demo tool fetch_page may reach although loopback, private or link-local: CIDRs, addresses and host names, each with an optional :port (e.g. 127.0.0.1:9000)", func(c *WorkerConfig) any { return &c.FetchAllow }},
	{"a2a-url", "serve the skills of the A2A agent at this base URL (its card is read at /.well-known/agent-card.json under it) or card URL (ending in .json)", func(c *WorkerConfig) any { return &c.A2A.URL }},
	{"a2a-prefix", "put this prefix and a dot before the bridged A2A skills' method names", func(c *WorkerConfig) any { return &c.A2A.Prefix }},
	{"a2a-token", "bearer token sent to the A2A agent (prefer the environment variable: a flag shows in the process list)", func(c *WorkerConfig) any { return &c.A2A.Token }},
	{"a2a-api-key", "API key sent to the A2A agent in --a2a-api-key-header (prefer the environment variable)", func(c *WorkerConfig) any { return &c.A2A.APIKey }},
	{"a2a-api-key-header", "header that carries --a2a-api-key", func(c *WorkerConfig) any { return &c.A2A.APIKeyHeader }},
	{"a2a-card-refresh", "how often the A2A agent's card is read again, to serve new skills and withdraw dropped ones", func(c *WorkerConfig) any { return &c.A2A.CardRefresh }},
}

// gcHeadroomUsage is the help of --gc-headroom.
const gcHeadroomUsage = "bytes above the live heap the garbage collector's heap goal stays at least, so that a small heap is not collected a hundred times a second under load (0: the Go runtime's own pace; GOGC or GOMEMLIMIT in the environment win)"

// StandaloneWorkerFlags are the flags of a [WorkerConfig] that only
// `toolbus worker` has: in `toolbus dev` the ingress serves the worker's
// metrics, and the prefix is the gateway's.
var StandaloneWorkerFlags = []Flag[WorkerConfig]{
	{"metrics-listen", "HTTP address of the worker's /metrics, /healthz and /readyz (empty for none)", func(c *WorkerConfig) any { return &c.MetricsListen }},
	{"gc-headroom", gcHeadroomUsage, func(c *WorkerConfig) any { return &c.GCHeadroom }},
	{"prefix", "NATS subject prefix of the cluster", func(c *WorkerConfig) any { return &c.Prefix }},
}

// TracingFlags are the flags of a [TracingConfig], which every serving
// command has.
var TracingFlags = []Flag[TracingConfig]{
	{"trace-exporter", "where spans go: off, stdout (JSON lines) or otlp (OTLP over HTTP)", func(c *TracingConfig) any { return &c.Exporter }},
	{"trace-endpoint", "base URL of the OTLP/HTTP collector, e.g. http://collector:4318 (spans go to /v1/traces under it); empty: the standard OTEL_EXPORTER_OTLP_ENDPOINT variable, else localhost:4318", func(c *TracingConfig) any { return &c.Endpoint }},
	{"trace-sample", "share of new traces recorded, 0 to 1; a call whose caller's trace is sampled is always recorded", func(c *TracingConfig) any { return &c.Sample }},
}

// DevFlags are the flags of a [DevConfig] of its own, which `toolbus dev`
// has beside its gateway's and its worker's.
var DevFlags = []Flag[DevConfig]{
	{"nats-listen", "TCP address of the embedded NATS server for outside clients (port 0 picks a free port, empty for none)", func(c *DevConfig) any { return &c.NATS.Listen }},
	{"nats-token", "an all-powerful token the clients of --nats-listen must present (default: one generated at start and printed); in-process parts need none", func(c *DevConfig) any { return &c.NATS.Token }},
	{"local-calls", "run a call of a demo tool in this process, without the bus, while the tool has a free concurrency slot (false: every call goes over the embedded NATS, as in a split deployment)", func(c *DevConfig) any { return &c.LocalCalls }},
	{"data", "directory of the embedded JetStream store (default: a temporary directory removed at exit)", func(c *DevConfig) any { return &c.NATS.DataDir }},
	{"pprof", "loopback address where the process serves the Go profiler's /debug/pprof/, to profile it under load (empty for none)", func(c *DevConfig) any { return &c.Pprof }},
}

// RemoteFlags are the flags of a [bus.RemoteConfig] but its inbox prefix,
// which every command that joins NATS over the network has.
var RemoteFlags = []Flag[bus.RemoteConfig]{
	{"nats", "NATS server URL(s), comma-separated", func(c *bus.RemoteConfig) any { return &c.URL }},
	{"nats-user", "NATS user name (with --nats-password or --nats-password-file; a user and password in the --nats URL work too)", func(c *bus.RemoteConfig) any { return &c.User }},
	{"nats-password", "NATS password of --nats-user", func(c *bus.RemoteConfig) any { return &c.Password }},
	{"nats-password-file", "file holding the NATS password of --nats-user, so that it is on no command line (white space around it is ignored); toolbus nats keeps its users' passwords in such files", func(c *bus.RemoteConfig) any { return &c.PasswordFile }},
	{"nats-token", "NATS authentication token", func(c *bus.RemoteConfig) any { return &c.Token }},
	{"token-file", "file holding the NATS authentication token, so that it is on no command line (white space around it is ignored): the file `toolbus nats --token-file` keeps", func(c *bus.RemoteConfig) any { return &c.TokenFile }},
	{"nats-nkey", "file holding the NATS user nkey seed (SU...) to authenticate with", func(c *bus.RemoteConfig) any { return &c.NKey }},
	{"nats-creds", "NATS credentials file (user JWT and seed) to authenticate with", func(c *bus.RemoteConfig) any { return &c.Creds }},
	{"nats-tls-ca", "PEM file of the CA that signs the NATS servers' certificates; turns TLS on", func(c *bus.RemoteConfig) any { return &c.TLSCA }},
	{"nats-tls-cert", "PEM client certificate presented to NATS (with --nats-tls-key); turns TLS on", func(c *bus.RemoteConfig) any { return &c.TLSCert }},
	{"nats-tls-key", "PEM key of --nats-tls-cert", func(c *bus.RemoteConfig) any { return &c.TLSKey }},
}

// WorkerRemoteFlags are the flags of a [bus.RemoteConfig] that only
// `toolbus worker` has.
var WorkerRemoteFlags = []Flag[bus.RemoteConfig]{
	{"nats-inbox-prefix", "subject prefix of the replies this worker receives; a NATS user limited to its own prefix reads no other user's replies", func(c *bus.RemoteConfig) any { return &c.InboxPrefix }},
}

// Explain adds to err, a condition that stopped a [bus.Startup] for good,
// what to do about it, naming the flags of these tables that fix it. The
// result wraps err; an error it has no advice for is returned unchanged.
func Explain(err error) error {
	var fix string
	switch {
	case errors.Is(err, bus.ErrCredentials):
		fix = "give the right --nats-user and --nats-password (or --nats-password-file), --nats-token (or --token-file), --nats-nkey or --nats-creds (or credentials in the --nats URL)"
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
