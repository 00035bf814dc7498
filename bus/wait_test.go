package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

func TestConnectError(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		permanent bool
		is        error
	}{
		{"refused", errors.New("dial tcp 127.0.0.1:4222: connect: connection refused"), false, nil},
		{"no servers", nats.ErrNoServers, false, nil},
		{"name not resolved yet", errors.New("dial tcp: lookup nats-1: no such host"), false, nil},
		{"authorization as text", errors.New("nats: authorization violation"), true, bus.ErrCredentials},
		{"authorization sentinel", fmt.Errorf("connect: %w", nats.ErrAuthorization), true, nats.ErrAuthorization},
		{"expired", nats.ErrAuthExpired, true, bus.ErrCredentials},
		{"tls required", nats.ErrSecureConnRequired, true, bus.ErrTLS},
		{"unknown authority", errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), true, bus.ErrTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bus.ConnectError(tt.err)
			if bus.Permanent(got) != tt.permanent {
				t.Errorf("Permanent(ConnectError(%v)) = %v, want %v", tt.err, bus.Permanent(got), tt.permanent)
			}
			if tt.is != nil && !errors.Is(got, tt.is) {
				t.Errorf("ConnectError(%v) = %v, want it to wrap %v", tt.err, got, tt.is)
			}
		})
	}
	if bus.ConnectError(nil) != nil {
		t.Error("ConnectError(nil) != nil")
	}
}

func TestJetStreamErrorCodes(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc := connectInProcess(t, e)
	api := func(status, code int, desc string) error {
		return fmt.Errorf("create: %w", &jetstream.APIError{Code: status, ErrorCode: jetstream.ErrorCode(code), Description: desc})
	}
	tests := []struct {
		name      string
		err       error
		permanent bool
		is        error
	}{
		{"cluster without leader", api(503, 10008, "JetStream system temporarily unavailable"), false, nil},
		{"peer offline", api(400, 10005, "no suitable peers for placement, peer offline"), false, nil},
		{"too few servers", api(400, 10005, "no suitable peers for placement"), false, nil},
		{"not clustered", api(500, 10074, "replicas > 1 not supported in non-clustered mode"), true, bus.ErrReplicas},
		{"off for the account", api(503, 10039, "jetstream not enabled for account"), true, bus.ErrNoJetStream},
		{"bad configuration", api(400, 10052, "invalid stream configuration"), true, bus.ErrJetStreamConfig},
		{"timeout", context.DeadlineExceeded, false, nil},
		{"no responders on a server with JetStream", jetstream.ErrJetStreamNotEnabled, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bus.JetStreamError(nc, 3, tt.err)
			if bus.Permanent(got) != tt.permanent {
				t.Errorf("Permanent(JetStreamError(%v)) = %v, want %v", tt.err, bus.Permanent(got), tt.permanent)
			}
			if tt.is != nil && !errors.Is(got, tt.is) {
				t.Errorf("JetStreamError(%v) = %v, want it to wrap %v", tt.err, got, tt.is)
			}
		})
	}
}

// TestJetStreamErrorServers checks the classification against what real
// servers answer: a bucket of three replicas on a server that is not
// clustered, and any bucket on a server without JetStream.
func TestJetStreamErrorServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("replicas on one server", func(t *testing.T) {
		nc := connectInProcess(t, startEmbedded(t, bus.EmbeddedConfig{}))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "r3", Replicas: 3})
		if got := bus.JetStreamError(nc, 3, err); !bus.Permanent(got) || !errors.Is(got, bus.ErrReplicas) {
			t.Errorf("JetStreamError(%v) = %v, want permanent %v", err, got, bus.ErrReplicas)
		}
	})
	t.Run("JetStream off", func(t *testing.T) {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		nc, err := bus.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if err := bus.CheckServer(nc, true); !bus.Permanent(err) || !errors.Is(err, bus.ErrNoJetStream) {
			t.Errorf("CheckServer(JetStream off, true) = %v, want permanent %v", err, bus.ErrNoJetStream)
		}
		if err := bus.CheckServer(nc, false); err != nil {
			t.Errorf("CheckServer(JetStream off, false) = %v, want nil", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
		if got := bus.JetStreamError(nc, 1, err); !bus.Permanent(got) || !errors.Is(got, bus.ErrNoJetStream) {
			t.Errorf("JetStreamError(%v) = %v, want permanent %v", err, got, bus.ErrNoJetStream)
		}
	})
}

func TestRetry(t *testing.T) {
	fast := bus.RetryConfig{Wait: time.Microsecond, MaxWait: time.Microsecond}
	transient := errors.New("no server yet")

	t.Run("until it succeeds", func(t *testing.T) {
		calls, reported := 0, 0
		cfg := fast
		cfg.Report = func(err error) {
			if !errors.Is(err, transient) {
				t.Errorf("reported %v, want %v", err, transient)
			}
			reported++
		}
		err := bus.Retry(context.Background(), cfg, func(context.Context) error {
			if calls++; calls < 3 {
				return transient
			}
			return nil
		})
		if err != nil || calls != 3 || reported != 2 {
			t.Errorf("Retry = %v after %d calls and %d reports, want nil after 3 and 2", err, calls, reported)
		}
	})
	t.Run("stops at a permanent error", func(t *testing.T) {
		calls := 0
		err := bus.Retry(context.Background(), fast, func(context.Context) error {
			calls++
			return bus.ConnectError(nats.ErrAuthorization)
		})
		if !errors.Is(err, bus.ErrCredentials) || calls != 1 {
			t.Errorf("Retry = %v after %d calls, want %v after 1", err, calls, bus.ErrCredentials)
		}
	})
	t.Run("ends with its context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := bus.Retry(ctx, bus.RetryConfig{Wait: time.Hour}, func(context.Context) error {
			cancel()
			return transient
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, transient) {
			t.Errorf("Retry = %v, want %v joined with %v", err, context.Canceled, transient)
		}
	})
	t.Run("a placement that lasts becomes permanent", func(t *testing.T) {
		tooFew := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}
		cfg := fast
		cfg.PlacementGrace = time.Nanosecond
		calls := 0
		err := bus.Retry(context.Background(), cfg, func(context.Context) error {
			calls++
			return bus.JetStreamError(nil, 3, tooFew)
		})
		if !bus.Permanent(err) || !errors.Is(err, bus.ErrReplicas) || calls < 2 {
			t.Errorf("Retry = %v after %d calls, want permanent %v after 2 or more", err, calls, bus.ErrReplicas)
		}
	})
	t.Run("a peer offline keeps passing", func(t *testing.T) {
		offline := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
		cfg := fast
		cfg.PlacementGrace = time.Nanosecond
		calls := 0
		err := bus.Retry(context.Background(), cfg, func(context.Context) error {
			if calls++; calls < 5 {
				return bus.JetStreamError(nil, 3, offline)
			}
			return nil
		})
		if err != nil {
			t.Errorf("Retry = %v, want nil once the peer is back", err)
		}
	})
}
