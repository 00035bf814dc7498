package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of the options.
const (
	// DefaultTimeoutGrace is how much longer than a call's timeout the
	// client waits for its answer; see [WithTimeoutGrace].
	DefaultTimeoutGrace = 2 * time.Second
	// DefaultMaxResponseBytes bounds one answer; see [WithMaxResponseBytes].
	DefaultMaxResponseBytes = 64 << 20
	// DefaultPingInterval is how often the WebSocket transport pings the
	// server; see [WithPingInterval].
	DefaultPingInterval = 15 * time.Second
	// DefaultReconnectMin and DefaultReconnectMax bound the WebSocket
	// transport's reconnection backoff; see [WithReconnectBackoff].
	DefaultReconnectMin = time.Second
	DefaultReconnectMax = 60 * time.Second
)

// dialTimeout bounds one WebSocket handshake.
const dialTimeout = 10 * time.Second

// settings are what the options of [New] set.
type settings struct {
	httpClient   *http.Client // nil: one of the client's own
	header       http.Header
	timeout      time.Duration
	grace        time.Duration
	retry        RetryPolicy
	logger       *slog.Logger
	maxBytes     int64
	pingInterval time.Duration
	reconnectMin time.Duration
	reconnectMax time.Duration
}

func defaultSettings() settings {
	return settings{
		header:       make(http.Header),
		grace:        DefaultTimeoutGrace,
		logger:       slog.New(slog.DiscardHandler),
		maxBytes:     DefaultMaxResponseBytes,
		pingInterval: DefaultPingInterval,
		reconnectMin: DefaultReconnectMin,
		reconnectMax: DefaultReconnectMax,
	}
}

// Option configures [New] and [Dial]. An option given a value it cannot use
// makes New return an error.
type Option func(*settings) error

// WithHTTPClient sets the HTTP client of the HTTP transport and of the
// WebSocket handshake. The default is a client of the [Client]'s own, with a
// transport cloned from [http.DefaultTransport] whose idle connections
// [Client.Close] closes; a client given here is left as it is.
func WithHTTPClient(hc *http.Client) Option {
	return func(s *settings) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient: nil *http.Client")
		}
		s.httpClient = hc
		return nil
	}
}

// WithHeader adds a header to every HTTP request and to the WebSocket
// handshake, for instance Authorization. It may be given more than once.
func WithHeader(name, value string) Option {
	return func(s *settings) error {
		if name == "" {
			return errors.New("client: WithHeader: empty name")
		}
		s.header.Add(name, value)
		return nil
	}
}

// WithTimeout sets the timeout of calls that ask for none with [Timeout]
// and whose context has no deadline. The default is none: the server's
// deadline applies (30s unless configured) and the client waits as long as
// the context lets it. See [Timeout] for what a timeout does.
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("client: WithTimeout(%s): must be positive", d)
		}
		s.timeout = d
		return nil
	}
}

// WithTimeoutGrace sets how much longer than a call's timeout the client
// waits for the answer, so that the server's own timeout error, sent at the
// deadline, arrives before the client gives up. The default is
// [DefaultTimeoutGrace].
func WithTimeoutGrace(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("client: WithTimeoutGrace(%s): must not be negative", d)
		}
		s.grace = d
		return nil
	}
}

// WithRetry turns on retries with the given policy; without it nothing is
// retried. See [RetryPolicy] for what is retried.
func WithRetry(p RetryPolicy) Option {
	return func(s *settings) error {
		if err := p.check(); err != nil {
			return err
		}
		s.retry = p.withDefaults()
		return nil
	}
}

// WithLogger sets the logger of the client: reconnections, retries and
// answers it drops. The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return errors.New("client: WithLogger: nil logger")
		}
		s.logger = l
		return nil
	}
}

// WithMaxResponseBytes bounds the size of one answer: an HTTP body or a
// WebSocket message. The default is [DefaultMaxResponseBytes].
func WithMaxResponseBytes(n int64) Option {
	return func(s *settings) error {
		if n <= 0 {
			return fmt.Errorf("client: WithMaxResponseBytes(%d): must be positive", n)
		}
		s.maxBytes = n
		return nil
	}
}

// WithPingInterval sets how often the WebSocket transport pings the server.
// A ping whose pong has not come back by the next one means the server is
// gone: the connection is closed, calls waiting on it fail with a retryable
// [*TransportError] wrapping [ErrConnectionLost], and the client reconnects.
// The default is [DefaultPingInterval]. The HTTP transport ignores it.
func WithPingInterval(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("client: WithPingInterval(%s): must be positive", d)
		}
		s.pingInterval = d
		return nil
	}
}

// WithReconnectBackoff sets the bounds of the WebSocket transport's
// reconnection backoff: the first attempt after a lost connection waits
// about min, every failed attempt doubles the wait up to max, and a
// connection that comes up resets it. The defaults are
// [DefaultReconnectMin] and [DefaultReconnectMax]. The HTTP transport
// ignores it.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(s *settings) error {
		if min <= 0 || max < min {
			return fmt.Errorf("client: WithReconnectBackoff(%s, %s): want 0 < min <= max", min, max)
		}
		s.reconnectMin, s.reconnectMax = min, max
		return nil
	}
}

// callSettings are what the options of one call or batch set.
type callSettings struct {
	timeout time.Duration
	id      *string
}

// SentID makes [Client.Call] store in *id the JSON-RPC id it sent the call
// with (a JSON string such as "c1"), so that a caller can show the answer
// as the server wrote it.
func SentID(id *string) CallOption {
	return func(s *callSettings) error {
		if id == nil {
			return errors.New("client: SentID(nil)")
		}
		s.id = id
		return nil
	}
}

// CallOption configures one call ([Client.Call], [Batch.Add]) or a whole
// batch ([Client.Batch]).
type CallOption func(*callSettings) error

// Timeout sets the deadline of a call. Over HTTP it is sent as the
// Toolbus-Timeout header, so the server answers a call still running then
// with a -32001 timeout error ([schema.ErrTimeout]); the client itself waits
// for the answer no longer than d plus the grace of [WithTimeoutGrace], and
// then fails the call with an error that matches both [schema.ErrTimeout]
// and [context.DeadlineExceeded].
//
// The header is per HTTP request, so one batch has one timeout: the
// smallest that the batch or any of its calls asked for. Calls that need
// different deadlines belong in different batches.
//
// A WebSocket message has no headers: over WebSocket, a timeout only bounds
// the client's wait, after which the client asks the server to cancel the
// call with an rpc.cancel notification. The default timeout of
// [WithTimeout] is sent in the handshake instead.
func Timeout(d time.Duration) CallOption {
	return func(s *callSettings) error {
		if d <= 0 {
			return fmt.Errorf("client: Timeout(%s): must be positive", d)
		}
		s.timeout = d
		return nil
	}
}

func applyCallOptions(s *callSettings, opts []CallOption) error {
	for _, o := range opts {
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}
