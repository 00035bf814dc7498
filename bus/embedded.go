package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultEmbeddedMaxPayload is the largest message the embedded server
// accepts (8 MiB, above NATS's 1 MiB default so that large results fit).
const DefaultEmbeddedMaxPayload = 8 << 20

// EmbeddedConfig configures [StartEmbedded]. The zero value starts a server
// that listens on no port (in-process clients only) and keeps JetStream data
// in a temporary directory removed at shutdown.
type EmbeddedConfig struct {
	// Listen is the host:port for NATS clients; port 0 picks a free port.
	// Empty means no TCP listener: only [Embedded.Connect] reaches it.
	Listen string
	// Token is what clients of the TCP listener must present ([WithToken],
	// or nats://TOKEN@host:port). With Listen set and Token empty, a token
	// is generated at start: the listener is never open to anyone who can
	// reach it. [Embedded.Token] returns it, and [Embedded.Connect]
	// presents it by itself, so in-process clients need not know it.
	// Without Listen it is not used.
	Token string
	// DataDir holds JetStream's store. Empty means a temporary directory
	// that Shutdown removes.
	DataDir string
	// MaxPayload is the largest message in bytes (default
	// [DefaultEmbeddedMaxPayload]).
	MaxPayload int32
	// Debug turns on the server's own log on standard error.
	Debug bool
}

// Embedded is a NATS server running inside this process with JetStream on.
type Embedded struct {
	srv     *server.Server
	tempDir string
	token   string
}

// StartEmbedded starts an embedded NATS server and waits until it is ready
// for connections (at most 10 seconds).
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	e := &Embedded{}
	opts := &server.Options{
		ServerName: "toolbus-embedded",
		JetStream:  true,
		NoSigs:     true,
		MaxPayload: cfg.MaxPayload,
		NoLog:      !cfg.Debug,
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultEmbeddedMaxPayload
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, portStr, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("bus: embedded listen address %q: %w", cfg.Listen, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("bus: embedded listen port %q is not a port number", portStr)
		}
		if port == 0 {
			port = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, port
		e.token = cfg.Token
		if e.token == "" {
			e.token = NewToken()
		}
		opts.Authorization = e.token
	}
	opts.StoreDir = cfg.DataDir
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "toolbus-nats-*")
		if err != nil {
			return nil, fmt.Errorf("bus: embedded data directory: %w", err)
		}
		e.tempDir, opts.StoreDir = dir, dir
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		e.cleanup()
		return nil, fmt.Errorf("bus: embedded server: %w", err)
	}
	if cfg.Debug {
		srv.ConfigureLogger()
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		e.cleanup()
		return nil, errors.New("bus: embedded server not ready after 10s")
	}
	e.srv = srv
	return e, nil
}

// ClientURL returns the nats:// URL of the TCP listener, or "" when the
// server listens on no port.
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Token returns the token clients of the TCP listener present, or "" when
// the server listens on no port.
func (e *Embedded) Token() string { return e.token }

// Connect opens an in-process connection to the server, without TCP, with the
// same options as [Connect]. It presents the server's token unless opts
// authenticate otherwise.
func (e *Embedded) Connect(opts ...Option) (*nats.Conn, error) {
	cfg, natsOpts, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg.auth == nil && e.token != "" {
		natsOpts = append(natsOpts, nats.Token(e.token))
	}
	natsOpts = append(natsOpts, nats.InProcessServer(e.srv))
	nc, err := nats.Connect("", natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect in-process: %w", err)
	}
	return nc, nil
}

// Server returns the underlying server, for tests and monitoring.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server, waits for it to exit, and removes its temporary
// data directory if it made one.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.cleanup()
}

func (e *Embedded) cleanup() {
	if e.tempDir != "" {
		os.RemoveAll(e.tempDir)
	}
}
