package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of [Connect]. They favour staying connected: a client retries for
// ever, with a pause that grows at each failed step and with jitter so that
// a fleet does not reconnect in lockstep, and buffers a bounded amount of
// outgoing data while it does. A server that refuses the credentials or
// TLS is tried again too, further apart (up to
// DefaultRefusedReconnectMaxWait): see the package documentation for why.
const (
	DefaultReconnectWait           = 250 * time.Millisecond
	DefaultReconnectMaxWait        = 5 * time.Second
	DefaultRefusedReconnectMaxWait = 30 * time.Second
	DefaultConnectTimeout          = 5 * time.Second
	DefaultDrainTimeout            = 30 * time.Second
	DefaultPingInterval            = 10 * time.Second
	DefaultMaxPingsOut             = 3
	DefaultReconnectBuffer         = 8 << 20
)

type connConfig struct {
	name         string
	logger       *slog.Logger
	drainTimeout time.Duration
	retryConnect bool
	// reconnectWait and reconnectMax bound the backoff of reconnection
	// ([WithReconnectWait]).
	reconnectWait, reconnectMax time.Duration
	// watch follows the connection's attempts; buildOptions makes it.
	watch       *watch
	status      func(*nats.Conn, error)
	auth        *auth
	tls         *tlsSettings
	inboxPrefix string
	extra       []nats.Option
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

// WithReconnectWait sets the backoff between attempts to reach a server
// once the connection has dropped, or failed to open with
// [WithRetryOnFailedConnect]: the first pause is first, and each failed
// attempt doubles it (with jitter) up to max; while a server refuses the
// credentials or TLS, up to the longer of max and
// [DefaultRefusedReconnectMaxWait]. A connection that is back starts again
// from first. Defaults [DefaultReconnectWait] and [DefaultReconnectMaxWait].
func WithReconnectWait(first, max time.Duration) Option {
	return func(c *connConfig) error {
		if first <= 0 || max < first {
			return fmt.Errorf("bus: reconnect wait %v up to %v: want a positive first wait no longer than the longest", first, max)
		}
		c.reconnectWait, c.reconnectMax = first, max
		return nil
	}
}

// WithStatusFunc has f told of the connection's state: nil each time it is
// established (the first time and after every reconnect), and the error of
// every failed attempt (once per backoff step), of every loss of the
// connection and of its final close, classified by [ConnectError] (so
// [Permanent] tells a refusal of the credentials from a server that is not
// there yet). A failed attempt is told as a sentence naming the address,
// the cause and the flag that fixes it, except a permanent failure before
// the connection was ever up, which comes as ConnectError returns it. f is
// called one call at a time, from nats.go's callback goroutine or from its
// reconnect loop; it must not block. With [WithRetryOnFailedConnect] it is
// how a process learns that NATS has come up (default: no function).
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
// An option that replaces one of toolbus's handlers or its dialer takes
// away what toolbus learns from it: the reports of [WithStatusFunc] and
// the log lines of failed attempts.
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
//
// When no server can be reached, the error says which address failed, why
// (nothing listens there, the host is unknown, the server refused the
// credentials, or it did not speak NATS: [ErrNotNATS]) and which flag to
// change. Once connected, the connection never gives up: it reconnects
// with backoff ([WithReconnectWait]) and logs one warning per failed step,
// in the same words.
func Connect(url string, opts ...Option) (*nats.Conn, error) {
	cfg, natsOpts, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg.auth != nil && urlHasUser(url) {
		return nil, fmt.Errorf("%w: %s and credentials in the URL", ErrAuthConflict, cfg.auth.option)
	}
	w := cfg.watch
	w.url, w.urlCreds = RedactURL(url), urlHasUser(url)
	nc, err := nats.Connect(url, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %s: %w", RedactURL(url), w.failure(err))
	}
	if nc.IsConnected() {
		w.connected.Store(true)
	}
	w.known(nc)
	return nc, nil
}

func buildOptions(opts []Option) (connConfig, []nats.Option, error) {
	cfg := connConfig{name: "toolbus", logger: slog.Default(), drainTimeout: DefaultDrainTimeout,
		reconnectWait: DefaultReconnectWait, reconnectMax: DefaultReconnectMaxWait}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return cfg, nil, err
		}
	}
	log := cfg.logger.With("component", "bus")
	w := &watch{log: log, status: cfg.status, wait1: cfg.reconnectWait, limit: cfg.reconnectMax}
	if cfg.auth != nil {
		w.auth = cfg.auth.option
	}
	cfg.watch = w
	natsOpts := []nats.Option{
		nats.Name(cfg.name),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(w.delay),
		nats.SetCustomDialer(&dialer{w: w, d: net.Dialer{Timeout: DefaultConnectTimeout}}),
		// A refused credential is tried again like any failure, with
		// backoff, rather than closing the connection the second time.
		nats.IgnoreAuthErrorAbort(),
		nats.Timeout(DefaultConnectTimeout),
		nats.DrainTimeout(cfg.drainTimeout),
		nats.PingInterval(DefaultPingInterval),
		nats.MaxPingsOutstanding(DefaultMaxPingsOut),
		nats.ReconnectBufSize(DefaultReconnectBuffer),
		nats.ConnectHandler(func(nc *nats.Conn) {
			w.known(nc)
			w.report(nc, nil)
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
				w.report(nc, ConnectError(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
			w.report(nc, nil)
		}),
		// Each failed attempt is also logged and reported once per
		// backoff step by w.delay, with its address; here it is only
		// noted, for the step to report when it learnt nothing sooner
		// (an in-process connection has no dialer). Only the failure of
		// the first connection is reported at once: it comes before
		// any step, and a process may stop on it.
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				w.tell(nc, err)
				if w.connected.Load() {
					return
				}
				if rep, ok := w.first(err); ok {
					w.report(nc, rep)
				}
			}
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if sub == nil && !nc.IsConnected() && !errors.Is(err, nats.ErrPermissionViolation) {
				// An attempt to connect that the server answered
				// and refused, as a refusal of the credentials.
				w.tell(nc, err)
				return
			}
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if errors.Is(err, nats.ErrConsumerNotActive) && !nc.IsConnected() {
				// A consumer misses its heartbeats while NATS is away,
				// every few seconds: the disconnect and each reconnect
				// step say so already.
				log.Debug("nats async error", "subject", subject, "err", err)
				return
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
			nats.ClosedHandler(func(nc *nats.Conn) {
				// A close asked for by the process has no error; one
				// that nats.go gave up on has.
				if err := nc.LastError(); err != nil {
					w.report(nc, ConnectError(err))
				}
			}))
	}
	natsOpts = append(natsOpts, cfg.securityOptions()...)
	return cfg, append(natsOpts, cfg.extra...), nil
}
