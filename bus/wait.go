package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinServerVersion is the oldest nats-server release toolbus works with:
// job records expire through per-message TTLs and limit markers, which
// JetStream has had since 2.11.0.
const MinServerVersion = "2.11.0"

// Conditions that waiting does not cure. A process that meets one should
// stop and say so; [Permanent] reports whether an error is one of them.
// Each is wrapped with the details of the case.
var (
	// ErrCredentials: the server refused the connection's credentials.
	ErrCredentials = errors.New("NATS refused the credentials")
	// ErrTLS: TLS could not be agreed with the server.
	ErrTLS = errors.New("TLS with NATS failed")
	// ErrServerTooOld: the server is older than [MinServerVersion].
	ErrServerTooOld = errors.New("the NATS server is too old")
	// ErrNoJetStream: JetStream is off on the server or for the account.
	ErrNoJetStream = errors.New("JetStream is not enabled")
	// ErrReplicas: JetStream cannot keep the replicas asked for.
	ErrReplicas = errors.New("JetStream cannot place the replicas asked for")
	// ErrJetStreamConfig: JetStream refused a stream or bucket as
	// configured.
	ErrJetStreamConfig = errors.New("JetStream refused the configuration")
)

// permanent marks an error that waiting will not cure.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent reports whether err is a condition that waiting will not cure
// (wrong credentials, a server too old, JetStream off, more replicas than
// servers), as opposed to one that may pass (no server yet, a JetStream
// cluster still electing its leader).
func Permanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// ConnectError classifies an error of connecting to NATS: a refusal of the
// credentials and a failed TLS handshake are permanent; anything else, such
// as a refused TCP connection or a name that does not resolve yet, may pass.
func ConnectError(err error) error {
	if err == nil {
		return nil
	}
	// nats.go reports a server's -ERR during CONNECT as plain text, so the
	// authentication errors are recognised by their words as well.
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "authorization violation") && !errors.Is(err, nats.ErrAuthorization) {
		err = nats.ErrAuthorization
	}
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired),
		strings.Contains(msg, "authorization violation"), strings.Contains(msg, "authentication expired"),
		strings.Contains(msg, "authentication revoked"), strings.Contains(msg, "user authentication"):
		return permanent{fmt.Errorf("%w: %w", ErrCredentials, err)}
	case isTLSError(err), strings.Contains(msg, "tls:"), strings.Contains(msg, "x509:"):
		return permanent{fmt.Errorf("%w: %w", ErrTLS, err)}
	}
	return err
}

func isTLSError(err error) bool {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		record      tls.RecordHeaderError
		certificate *tls.CertificateVerificationError
	)
	return errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.Is(err, nats.ErrClientCertOrRootCAsRequired) ||
		errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &record) || errors.As(err, &certificate)
}

// CheckServer checks the server nc is connected to: an error when it is
// older than [MinServerVersion], or, with jetStream, when JetStream is off
// on it. Both errors are permanent. A connection that is not connected
// passes: there is nothing to check yet.
func CheckServer(nc *nats.Conn, jetStream bool) error {
	if !nc.IsConnected() {
		return nil
	}
	v := nc.ConnectedServerVersion()
	if !versionAtLeast(v, MinServerVersion) {
		return permanent{fmt.Errorf("%w: %s at %s is version %s, and toolbus needs %s or newer",
			ErrServerTooOld, serverName(nc), nc.ConnectedUrlRedacted(), v, MinServerVersion)}
	}
	if on, _ := nc.ConnectedServerJetStream(); jetStream && !on {
		return permanent{fmt.Errorf("%w on %s at %s", ErrNoJetStream, serverName(nc), nc.ConnectedUrlRedacted())}
	}
	return nil
}

func serverName(nc *nats.Conn) string {
	if n := nc.ConnectedServerName(); n != "" {
		return "server " + n
	}
	return "the server"
}

// versionAtLeast reports whether the release v (such as "2.11.4" or
// "2.12.0-beta.1") is min or newer; a version it cannot read is taken as
// new enough, since the server's own checks still apply.
func versionAtLeast(v, min string) bool {
	have, ok := versionNumbers(v)
	if !ok {
		return true
	}
	want, _ := versionNumbers(min)
	for i := range want {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

func versionNumbers(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// JetStream API error codes that setting up a stream or bucket meets while
// a cluster forms or that say its configuration can never be placed.
const (
	jsClusterNotAvailable   = 10008 // JetStream system temporarily unavailable
	jsClusterNoPeers        = 10005 // no suitable peers for placement
	jsInsufficientResources = 10023
	jsNotEnabledForAccount  = 10039
	jsNotEnabled            = 10076
	jsReplicasNotSupported  = 10074 // replicas > 1 not supported in non-clustered mode
)

// placementError is a placement that found too few servers and named no
// server as offline: a cluster still forming, or one smaller than the
// replicas asked. [Retry] tells them apart by how long it lasts.
type placementError struct {
	err      error
	replicas int
}

func (p placementError) Error() string { return p.err.Error() }
func (p placementError) Unwrap() error { return p.err }

// JetStreamError classifies an error of setting up a stream, bucket or
// consumer with replicas replicas on nc. Permanent: JetStream off (on the
// server or for the account), replicas above one on a server that is not
// clustered, and a configuration JetStream refuses. Passing: a cluster
// without a leader yet, a placement that names a server as offline,
// timeouts and a connection that is not up. A placement that finds too
// few servers and names none as offline passes for a while under [Retry]
// and then becomes permanent: a forming cluster has by then found its
// servers, and one smaller than replicas never will.
func JetStreamError(nc *nats.Conn, replicas int, err error) error {
	if err == nil || Permanent(err) {
		return err
	}
	// Whatever a request said, a server that has JetStream off will not
	// answer the next one either.
	if on, _ := nc.ConnectedServerJetStream(); nc != nil && nc.IsConnected() && !on {
		return permanent{fmt.Errorf("%w on %s at %s: %w", ErrNoJetStream, serverName(nc), nc.ConnectedUrlRedacted(), err)}
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case jsClusterNotAvailable, jsInsufficientResources:
			return err
		case jsClusterNoPeers:
			if strings.Contains(api.Description, "offline") {
				return err
			}
			return placementError{err, replicas}
		case jsNotEnabled, jsNotEnabledForAccount:
			if on, _ := nc.ConnectedServerJetStream(); on && api.ErrorCode == jsNotEnabled {
				return err // enabled on the server: still starting
			}
			return permanent{fmt.Errorf("%w: %w", ErrNoJetStream, err)}
		case jsReplicasNotSupported:
			return permanent{fmt.Errorf("%w: %d replicas on a NATS server that is not clustered: %w", ErrReplicas, replicas, err)}
		}
		if api.Code >= 400 && api.Code < 500 {
			return permanent{fmt.Errorf("%w: %w", ErrJetStreamConfig, err)}
		}
		return err
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return permanent{fmt.Errorf("%w: %w", ErrNoJetStream, err)}
	}
	return err
}

// StoreFull reports whether JetStream refused a write because a stream, a
// bucket or the server's store is at its byte cap: a condition that a
// caller is told of, as a limit, rather than one to retry at once.
func StoreFull(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	return api.ErrorCode == jsInsufficientResources ||
		strings.Contains(api.Description, "maximum bytes") ||
		strings.Contains(api.Description, "insufficient resources")
}

// Defaults of [Retry].
const (
	DefaultRetryWait      = 250 * time.Millisecond
	DefaultRetryMaxWait   = 5 * time.Second
	DefaultPlacementGrace = time.Minute
)

// RetryConfig tunes [Retry]; its zero value uses the defaults.
type RetryConfig struct {
	// Wait is the first pause after a failure, doubled after each one up
	// to MaxWait, with jitter (defaults [DefaultRetryWait] and
	// [DefaultRetryMaxWait]).
	Wait, MaxWait time.Duration
	// PlacementGrace is how long a placement that finds too few servers
	// (and names none offline) may go on failing before it is taken as
	// permanent: longer than a cluster takes to form (default
	// [DefaultPlacementGrace]).
	PlacementGrace time.Duration
	// Report, if set, is told of every failure that will be retried.
	Report func(err error)
}

// Retry calls setup until it succeeds, fails permanently (see [Permanent])
// or ctx ends, pausing between attempts as cfg says. It returns nil, the
// permanent error, or ctx's error joined with the last failure.
func Retry(ctx context.Context, cfg RetryConfig, setup func(ctx context.Context) error) error {
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultRetryWait
	}
	if cfg.MaxWait < cfg.Wait {
		cfg.MaxWait = max(DefaultRetryMaxWait, cfg.Wait)
	}
	if cfg.PlacementGrace <= 0 {
		cfg.PlacementGrace = DefaultPlacementGrace
	}
	var placing time.Time // when a run of placement failures began
	wait := cfg.Wait
	for {
		err := setup(ctx)
		if err == nil || Permanent(err) {
			return err
		}
		var p placementError
		if errors.As(err, &p) {
			if placing.IsZero() {
				placing = time.Now()
			} else if time.Since(placing) >= cfg.PlacementGrace {
				return permanent{fmt.Errorf("%w: %d replicas still found too few servers after %v: %w",
					ErrReplicas, p.replicas, cfg.PlacementGrace, err)}
			}
		} else {
			placing = time.Time{}
		}
		if cfg.Report != nil {
			cfg.Report(err)
		}
		// Jitter keeps a fleet that started together from retrying in
		// step.
		pause := wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, cfg.MaxWait)
	}
}

// KeyValue opens the key-value bucket cfg describes, creating it when it
// does not exist and bringing it to cfg only when it exists already (so
// that every process that starts does not rewrite a bucket others use; see
// the jobs store). A request JetStream never answers, as it does not
// answer one the NATS user may not make, is reported as the missing
// permission it most likely is.
func KeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("bucket %s: JetStream did not answer, which is how it refuses a NATS user without the permission "+
			"to publish on $JS.API.STREAM.*.KV_%s (see deploy/nats/cluster-secure.conf): %w", cfg.Bucket, cfg.Bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
