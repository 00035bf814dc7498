package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of [Connect]. They favour staying connected: a client retries for
// ever, a little apart and with jitter so that a fleet does not reconnect in
// lockstep, and buffers a bounded amount of outgoing data while it does.
const (
	DefaultReconnectWait   = 250 * time.Millisecond
	DefaultConnectTimeout  = 5 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
	DefaultPingInterval    = 10 * time.Second
	DefaultMaxPingsOut     = 3
	DefaultReconnectBuffer = 8 << 20
)

type connConfig struct {
	name         string
	logger       *slog.Logger
	drainTimeout time.Duration
	retryConnect bool
	status       func(*nats.Conn, error)
	auth         *auth
	tls          *tlsSettings
	inboxPrefix  string
	extra        []nats.Option
}

// Option configures [Connect].
type Option func(*connConfig) error

// WithName sets the client name NATS shows in its monitoring (default
// "toolbus").
func WithName(name string) Option {
	return func(c *connConfig) error {
		if name == "" {
			return errors.New("bus: empty connection name")
		}
		c.name = name
		return nil
	}
}

// WithLogger sets the logger for connection events (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *connConfig) error {
		if l == nil {
			return errors.New("bus: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithDrainTimeout bounds how long Drain waits for in-flight messages
// (default [DefaultDrainTimeout]).
func WithDrainTimeout(d time.Duration) Option {
	return func(c *connConfig) error {
		if d <= 0 {
			return fmt.Errorf("bus: drain timeout must be positive, got %v", d)
		}
		c.drainTimeout = d
		return nil
	}
}

// WithRetryOnFailedConnect makes [Connect] return at once even when no server
// answers yet, and keep trying in the background (default off: the first
// connection must succeed, so a wrong URL is reported at start).
func WithRetryOnFailedConnect() Option {
	return func(c *connConfig) error {
		c.retryConnect = true
		return nil
	}
}

// WithStatusFunc has f told of the connection's state: nil each time it is
// established (the first time and after every reconnect), and the error of
// every failed attempt, of every loss of the connection and of its final
// close, classified by [ConnectError] (so [Permanent] tells a refusal of
// the credentials from a server that is not there yet). f runs on
// nats.go's callback goroutine, one call at a time; it must not block.
// With [WithRetryOnFailedConnect] it is how a process learns that NATS has
// come up (default: no function). With a status function the connection
// does not give up by itself after the same authentication error twice:
// f is told of each, and decides.
func WithStatusFunc(f func(nc *nats.Conn, err error)) Option {
	return func(c *connConfig) error {
		if f == nil {
			return errors.New("bus: nil status func")
		}
		c.status = f
		return nil
	}
}

// WithInboxPrefix makes the connection receive the replies to its own
// requests (JetStream's answers, fetched jobs, status answers) on subjects
// under prefix instead of nats.go's "_INBOX" (default "_INBOX"). A NATS
// user allowed to subscribe only to "prefix.>" then reads nobody else's
// replies: the secured configuration in deploy/nats gives workers
// [WorkerInboxPrefix]. prefix is one or more subject tokens without
// wildcards, such as "_INBOX_worker" or "_INBOX_worker_math".
func WithInboxPrefix(prefix string) Option {
	return func(c *connConfig) error {
		if err := CheckInboxPrefix(prefix); err != nil {
			return fmt.Errorf("bus: %w", err)
		}
		c.inboxPrefix = prefix
		return nil
	}
}

// WorkerInboxPrefix is the inbox prefix `toolbus worker` receives its
// replies under, which the worker user of deploy/nats/cluster-secure.conf
// may subscribe to, while the ingress's replies stay under "_INBOX".
const WorkerInboxPrefix = "_INBOX_worker"

// CheckInboxPrefix returns an error unless p is one or more non-empty
// subject tokens without wildcards or white space, as [WithInboxPrefix]
// needs.
func CheckInboxPrefix(p string) error {
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return fmt.Errorf("inbox prefix %q is not one or more subject tokens without wildcards, such as %q", p, WorkerInboxPrefix)
		}
	}
	return nil
}

// WithNATSOptions appends raw nats.go options, applied after toolbus's own.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *connConfig) error {
		c.extra = append(c.extra, opts...)
		return nil
	}
}

// Connect connects to the NATS servers at url (a comma-separated list is
// accepted) with toolbus's reconnect and drain settings. Credentials in the
// URL (nats://user:password@host, nats://token@host) are used as given; with
// an authentication option as well, Connect returns [ErrAuthConflict]. They
// never appear in its errors.
func Connect(url string, opts ...Option) (*nats.Conn, error) {
	cfg, natsOpts, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg.auth != nil && urlHasUser(url) {
		return nil, fmt.Errorf("%w: %s and credentials in the URL", ErrAuthConflict, cfg.auth.option)
	}
	nc, err := nats.Connect(url, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

func buildOptions(opts []Option) (connConfig, []nats.Option, error) {
	cfg := connConfig{name: "toolbus", logger: slog.Default(), drainTimeout: DefaultDrainTimeout}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return cfg, nil, err
		}
	}
	log := cfg.logger.With("component", "bus")
	status := func(nc *nats.Conn, err error) {
		if cfg.status != nil {
			cfg.status(nc, ConnectError(err))
		}
	}
	natsOpts := []nats.Option{
		nats.Name(cfg.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(DefaultReconnectWait),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(DefaultConnectTimeout),
		nats.DrainTimeout(cfg.drainTimeout),
		nats.PingInterval(DefaultPingInterval),
		nats.MaxPingsOutstanding(DefaultMaxPingsOut),
		nats.ReconnectBufSize(DefaultReconnectBuffer),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
				status(nc, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
			status(nc, nil)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("nats async error", "subject", subject, "err", err)
		}),
	}
	if cfg.retryConnect {
		natsOpts = append(natsOpts, nats.RetryOnFailedConnect(true))
	}
	if cfg.inboxPrefix != "" {
		natsOpts = append(natsOpts, nats.CustomInboxPrefix(cfg.inboxPrefix))
	}
	if cfg.status != nil {
		natsOpts = append(natsOpts,
			nats.IgnoreAuthErrorAbort(),
			nats.ConnectHandler(func(nc *nats.Conn) { status(nc, nil) }),
			nats.ReconnectErrHandler(func(nc *nats.Conn, err error) {
				if err != nil {
					status(nc, err)
				}
			}),
			nats.ClosedHandler(func(nc *nats.Conn) {
				// A close asked for by the process has no error; one
				// that nats.go gave up on (the same authentication
				// error twice) has.
				if err := nc.LastError(); err != nil {
					status(nc, err)
				}
			}))
	}
	natsOpts = append(natsOpts, cfg.securityOptions()...)
	return cfg, append(natsOpts, cfg.extra...), nil
}
