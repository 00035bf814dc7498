package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/internal/authfile"
)

// securityConfig is the authentication, admission and resilience policy of
// an ingress and its aggregator.
type securityConfig struct {
	auth           string // "on" or "off"
	authFile       string
	jwtSecretFile  string
	jwksFile       string
	jwtIssuer      string
	jwtAudience    string
	jwtLeeway      time.Duration
	jwtCallerClaim string
	jwtRolesClaim  string
	jwtOperator    string
	jwtWeight      string
	jwtExempt      string

	rateLimit    float64
	rateBurst    int
	methodCaps   []string
	idempotency  bool
	idemTTL      time.Duration
	idemMaxBytes int64
	idemRecords  int
	idemBytes    int64
	idemFailOpen bool

	heartbeat       time.Duration
	heartbeatMisses int
	ackTimeout      time.Duration
	ackDelay        time.Duration
	retrySafe       []string
	maxAttempts     int
	busyWait        time.Duration
	breakerFailures int
	breakerOpenFor  time.Duration
	breakerTrials   int
	hedge           time.Duration
}

// flags defines the security flags; dev says whether authentication may
// default to off (the dev command) or must be configured or turned off
// explicitly (the ingress).
func (c *securityConfig) flags(cmd *cobra.Command, dev bool) {
	f := cmd.Flags()
	authDefault := "on"
	if dev {
		authDefault = "off"
	}
	f.StringVar(&c.auth, "auth", authDefault, "authentication: on (needs --auth-file or --jwt-*) or off (every caller reaches every tool)")
	f.StringVar(&c.authFile, "auth-file", "", `JSON file of API keys and allowed methods: {"keys":[{"name","sha256","allow":["math.*"],"operator":false,"weight":1,"exempt":false}],"allow":{"caller":["pattern"]},"default_allow":[]}`)
	f.StringVar(&c.jwtSecretFile, "jwt-secret-file", "", "file holding the HS256 secret of bearer JWTs")
	f.StringVar(&c.jwksFile, "jwt-jwks-file", "", "JWKS file of the RS256/ES256 public keys of bearer JWTs")
	f.StringVar(&c.jwtIssuer, "jwt-issuer", "", "required iss of bearer JWTs")
	f.StringVar(&c.jwtAudience, "jwt-audience", "", "required aud of bearer JWTs")
	f.DurationVar(&c.jwtLeeway, "jwt-leeway", auth.DefaultJWTLeeway, "clock skew tolerated on exp, nbf and iat")
	f.StringVar(&c.jwtCallerClaim, "jwt-caller-claim", "sub", "JWT claim naming the caller")
	f.StringVar(&c.jwtRolesClaim, "jwt-roles-claim", "roles", "JWT claim holding the caller's roles (an array, or a string of space-separated roles)")
	f.StringVar(&c.jwtOperator, "jwt-operator-role", "", "role that makes a JWT caller an operator, who sees every caller's dashboard data (empty: no token does)")
	f.StringVar(&c.jwtWeight, "jwt-weight-claim", auth.DefaultWeightClaim, "JWT claim holding the caller's weight, its share of the ingress while others are busy too (a number up to 1000; absent: 1)")
	f.StringVar(&c.jwtExempt, "jwt-exempt-role", "", "role that exempts a JWT caller from the ingress's queues, for health checks and operators (empty: no token is)")
	f.Float64Var(&c.rateLimit, "rate-limit", 0, "calls a second per caller, in a token bucket (0: no rate limit)")
	f.IntVar(&c.rateBurst, "rate-burst", 100, "bursts of calls a caller's token bucket allows (with --rate-limit)")
	f.StringSliceVar(&c.methodCaps, "method-max-in-flight", nil, "per-method in-flight caps, method=n (e.g. fetch_page=64)")
	f.BoolVar(&c.idempotency, "idempotency", true, "honour Idempotency-Key headers with records in JetStream (needs JetStream)")
	f.DurationVar(&c.idemTTL, "idempotency-ttl", aggregator.DefaultIdempotencyTTL, "how long a finished call's answer is replayed for its idempotency key")
	f.Int64Var(&c.idemMaxBytes, "idempotency-max-bytes", aggregator.DefaultIdempotencyMaxBytes, "byte cap of the JetStream bucket of idempotency records; once full, calls with Idempotency-Key are refused -32003")
	f.IntVar(&c.idemRecords, "idempotency-caller-max-records", aggregator.DefaultIdempotencyCallerMaxRecords, "idempotency records one authenticated caller may hold on this ingress")
	f.Int64Var(&c.idemBytes, "idempotency-caller-max-bytes", aggregator.DefaultIdempotencyCallerMaxBytes, "bytes of idempotency records one authenticated caller may hold on this ingress")
	f.BoolVar(&c.idemFailOpen, "idempotency-fail-open", false, "run a call with Idempotency-Key without its record when the store cannot record it, instead of refusing it -32003 (a retry may then run it twice)")
	f.DurationVar(&c.heartbeat, "heartbeat", aggregator.DefaultHeartbeat, "interval of the workers' heartbeats of a running call (0: off)")
	f.IntVar(&c.heartbeatMisses, "heartbeat-misses", aggregator.DefaultHeartbeatMisses, "missed heartbeats after which a call's worker is lost, and unheard heartbeats after which a worker cancels a call of a vanished ingress")
	f.DurationVar(&c.ackTimeout, "ack-timeout", aggregator.DefaultAckTimeout, "how long a retry-safe call may go unacknowledged before it is published again")
	f.DurationVar(&c.ackDelay, "ack-delay", aggregator.DefaultAckDelay, "how long a worker may hold back the ack of a call of a method whose workers were seen to acknowledge, so that a call answered sooner costs one bus message less; a call silent for the delay and the heartbeat misses is lost (0: an ack at once); at most half the ack timeout and half the heartbeat")
	f.StringSliceVar(&c.retrySafe, "retry-safe", nil, "method patterns safe to run twice: retried on a lost worker, hedged (e.g. search.>,fetch_page)")
	f.IntVar(&c.maxAttempts, "max-attempts", aggregator.DefaultMaxAttempts, "most publications of a retry-safe call")
	f.DurationVar(&c.busyWait, "busy-wait", aggregator.DefaultBusyWait, "how long a call refused by busy workers is retried before -32002")
	f.IntVar(&c.breakerFailures, "breaker-failures", 0, "failures in a row that open a method's circuit (0: no circuit breaker)")
	f.DurationVar(&c.breakerOpenFor, "breaker-open-for", aggregator.DefaultBreakerOpenFor, "how long an open circuit refuses calls before a trial")
	f.IntVar(&c.breakerTrials, "breaker-trials", aggregator.DefaultBreakerTrials, "trial calls of a half-open circuit")
	f.DurationVar(&c.hedge, "hedge", 0, "publish a retry-safe call again when it has no reply after this long (0: no hedging)")
}

// authFileShares are the members of each key of --auth-file that set its
// caller's share of the ingress, read beside [authfile.File]: "weight" (1 when
// absent) and "exempt".
type authFileShares struct {
	Keys []struct {
		Weight float64 `json:"weight"`
		Exempt bool    `json:"exempt"`
	} `json:"keys"`
}

// errNoAuth means authentication is on but nothing to authenticate with
// was configured.
var errNoAuth = errors.New("authentication is on but not configured: give --auth-file or --jwt-secret-file/--jwt-jwks-file, or --auth=off to run without it")

// ingressOptions returns the ingress options of c, and logs a warning when
// authentication is off.
func (c *securityConfig) ingressOptions(log *slog.Logger) ([]ingress.Option, error) {
	var opts []ingress.Option
	switch c.auth {
	case "off":
		log.Warn("authentication is off: every caller reaches every tool")
	case "on":
		a, err := c.authConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, ingress.WithAuth(a))
	default:
		return nil, fmt.Errorf("--auth must be on or off, got %q", c.auth)
	}
	if c.rateLimit > 0 {
		opts = append(opts, ingress.WithRateLimit(quota.RateLimit{PerSecond: c.rateLimit, Burst: c.rateBurst}))
	}
	return opts, nil
}

// validate checks the authentication flags and the policy's, so that a
// command reports them before anything connects.
func (c *securityConfig) validate() error {
	if _, err := c.ingressOptions(discard); err != nil {
		return err
	}
	_, err := c.aggregatorOptions()
	return err
}

func (c *securityConfig) authConfig() (auth.Config, error) {
	var a auth.Config
	if c.authFile != "" {
		b, err := os.ReadFile(c.authFile)
		if err != nil {
			return a, fmt.Errorf("--auth-file: %w", err)
		}
		var f authfile.File
		var shares authFileShares
		if err := errors.Join(json.Unmarshal(b, &f), json.Unmarshal(b, &shares)); err != nil {
			return a, fmt.Errorf("--auth-file %s: %w", c.authFile, err)
		}
		for i, k := range f.Keys {
			s := shares.Keys[i]
			a.Keys = append(a.Keys, auth.APIKey{Name: k.Name, SHA256: k.SHA256, Allow: k.Allow, Operator: k.Operator,
				Weight: s.Weight, Exempt: s.Exempt})
		}
		a.Allow, a.DefaultAllow = f.Allow, f.DefaultAllow
	}
	if c.jwtSecretFile != "" || c.jwksFile != "" {
		j := &auth.JWT{JWKSFile: c.jwksFile, Issuer: c.jwtIssuer, Audience: c.jwtAudience,
			Leeway: c.jwtLeeway, CallerClaim: c.jwtCallerClaim, RolesClaim: c.jwtRolesClaim, OperatorRole: c.jwtOperator,
			WeightClaim: c.jwtWeight, ExemptRole: c.jwtExempt}
		if c.jwtSecretFile != "" {
			b, err := os.ReadFile(c.jwtSecretFile)
			if err != nil {
				return a, fmt.Errorf("--jwt-secret-file: %w", err)
			}
			j.Secret = []byte(strings.TrimSpace(string(b)))
		}
		a.JWT = j
	}
	if len(a.Keys) == 0 && a.JWT == nil {
		return a, errNoAuth
	}
	return a, nil
}

// aggregatorOptions returns the aggregator options of c but idempotency,
// whose bucket the ingress opens once JetStream is up.
func (c *securityConfig) aggregatorOptions() ([]aggregator.Option, error) {
	opts := []aggregator.Option{
		aggregator.WithHeartbeat(c.heartbeat, c.heartbeatMisses),
		aggregator.WithMaxAttempts(c.maxAttempts),
		aggregator.WithBusyWait(c.busyWait),
		aggregator.WithHedge(c.hedge),
		aggregator.WithIdempotencyCallerLimits(c.idemRecords, c.idemBytes),
		aggregator.WithIdempotencyFailOpen(c.idemFailOpen),
	}
	opts = append(opts, aggregator.WithAckDelay(c.ackDelay))
	if c.ackTimeout > 0 {
		opts = append(opts, aggregator.WithAckTimeout(c.ackTimeout))
	}
	if len(c.retrySafe) > 0 {
		opts = append(opts, aggregator.WithRetrySafe(c.retrySafe...))
	}
	caps, err := parseMethodCaps(c.methodCaps)
	if err != nil {
		return nil, err
	}
	for m, n := range caps {
		opts = append(opts, aggregator.WithMethodMaxInFlight(m, n))
	}
	if c.breakerFailures > 0 {
		opts = append(opts, aggregator.WithBreaker(aggregator.Breaker{
			Failures: c.breakerFailures, OpenFor: c.breakerOpenFor, Trials: c.breakerTrials}))
	}
	return opts, nil
}

// parseMethodCaps reads method=n pairs.
func parseMethodCaps(pairs []string) (map[string]int, error) {
	caps := map[string]int{}
	for _, p := range pairs {
		m, v, ok := strings.Cut(p, "=")
		n, err := strconv.Atoi(v)
		if !ok || m == "" || err != nil || n <= 0 {
			return nil, fmt.Errorf("--method-max-in-flight: %q is not method=n with n positive", p)
		}
		caps[m] = n
	}
	return caps, nil
}
