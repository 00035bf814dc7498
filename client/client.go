package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Client sends JSON-RPC 2.0 calls to a toolbus ingress. It is made by [New]
// or [Dial], is safe for concurrent use, and must be closed with
// [Client.Close] when done with.
type Client struct {
	url    string
	s      settings
	ids    *idSource
	t      transport
	own    *http.Transport // the transport the client made for itself, if it did
	closed atomic.Bool
}

// transport delivers messages. Its errors are [*TransportError] values,
// [ErrClosed], or the error of the context.
type transport interface {
	// roundTrip sends m and returns the responses of its answer, none when
	// m holds only notifications.
	roundTrip(ctx context.Context, m *message) ([]schema.Response, error)
	// close stops the transport; calls waiting in it fail with ErrClosed.
	close() error
}

// New returns a client of the endpoint at rawURL. The scheme chooses the
// transport: http:// and https:// post each message to the URL; ws:// and
// wss:// keep one WebSocket connection open, which New starts dialing in the
// background (see [Dial] to wait for it).
func New(rawURL string, opts ...Option) (*Client, error) {
	s := defaultSettings()
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("client: invalid URL: %w", err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: URL %q has no host", rawURL)
	}
	c := &Client{url: rawURL, ids: newIDSource()}
	if s.httpClient == nil {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			c.own = dt.Clone()
		} else {
			c.own = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		s.httpClient = &http.Client{Transport: c.own}
	}
	c.s = s
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		c.t = &httpTransport{url: rawURL, hc: s.httpClient, header: s.header, maxBytes: s.maxBytes}
	case "ws", "wss":
		c.t = newWSTransport(rawURL, &c.s)
	default:
		return nil, fmt.Errorf("client: URL %q: scheme must be http, https, ws or wss", rawURL)
	}
	return c, nil
}

// Dial is [New] that, for a WebSocket URL, also waits until the first
// connection is up, so that a wrong URL or a server that is down is
// reported at once. A first connection refused outright (nothing listens
// at the address) fails at once with an error that names the address;
// other failures are dialed again until ctx ends, and the error returned
// then holds the last one. For an HTTP URL it is New: HTTP connects per
// request.
func Dial(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	c, err := New(rawURL, opts...)
	if err != nil {
		return nil, err
	}
	if ws, ok := c.t.(*wsTransport); ok {
		if err := ws.waitFirst(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close ends the client. Over WebSocket it closes the connection, fails the
// calls still waiting with [ErrClosed] and stops every goroutine of the
// client before it returns. Over HTTP, calls in flight end under their own
// contexts, and the idle connections of the client's own HTTP transport are
// closed. Calls after Close fail with [ErrClosed]. Close may be called more
// than once.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.t.close()
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
	return err
}

// Call calls method with params and decodes the result into result.
//
// Params are encoded with encoding/json and must encode as an object or an
// array; a json.RawMessage is sent as it is and nil sends none. A nil
// result ignores the result and a *json.RawMessage keeps it raw.
//
// An error the server answered is returned as the [*schema.Error] it sent,
// so errors.Is(err, schema.ErrTimeout) and errors.As work on it. A failure
// to deliver the call or to read its answer is a [*TransportError]
// (errors.Is(err, ErrTransport)); an answer that breaks the protocol
// matches [ErrInvalidResponse], [ErrMissingResponse] or
// [ErrUnknownResponse]; when ctx ends first, the error wraps ctx's error.
func (c *Client) Call(ctx context.Context, method string, params any, result any, opts ...CallOption) error {
	var cs callSettings
	if err := applyCallOptions(&cs, opts); err != nil {
		return err
	}
	cl, err := c.newCall(method, params, true)
	if err != nil {
		return err
	}
	if cs.id != nil {
		*cs.id = strconv.Quote(cl.id) // its characters need no JSON escape
	}
	_, problems := c.exchange(ctx, []*call{cl}, false, cs.timeout)
	if cl.err != nil {
		if problems != nil && errors.Is(cl.err, ErrMissingResponse) {
			return fmt.Errorf("%w (%w)", cl.err, problems)
		}
		return cl.err
	}
	if problems != nil {
		return problems
	}
	return cl.decode(result)
}

// Notify sends method with params as a notification: the server runs it
// and answers nothing. A nil error means the notification was delivered,
// not that it succeeded. A notification is never retried.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	cl, err := c.newCall(method, params, false)
	if err != nil {
		return err
	}
	whole, problems := c.exchange(ctx, []*call{cl}, false, 0)
	if whole != nil {
		return whole
	}
	return errors.Join(cl.err, problems)
}

func (c *Client) newCall(method string, params any, withID bool) (*call, error) {
	p, err := marshalParams(params)
	if err != nil {
		return nil, fmt.Errorf("%w (method %s)", err, method)
	}
	cl := &call{method: method, params: p}
	if withID {
		cl.id = c.ids.next()
	}
	return cl, nil
}

// exchange sends calls as one message (a batch when batch is set) and
// gives every call its outcome, retrying as the retry policy says. whole
// is the last message-level failure that decided an outcome: a transport
// error, or an error the server answered for the message as a whole.
// problems are the protocol violations seen in any answer.
func (c *Client) exchange(ctx context.Context, calls []*call, batch bool, timeout time.Duration) (whole, problems error) {
	if c.closed.Load() {
		for _, cl := range calls {
			cl.result, cl.err = nil, ErrClosed
		}
		return ErrClosed, nil
	}
	if timeout == 0 {
		if _, ok := ctx.Deadline(); !ok {
			timeout = c.s.timeout
		}
	}
	var errs []error
	send := calls
	for attempt := 1; ; attempt++ {
		whole, p := c.once(ctx, send, batch, timeout)
		if p != nil {
			errs = append(errs, p)
		}
		again, wait := c.retries(ctx, send, attempt, whole)
		if len(again) > 0 && wait == 0 {
			wait = c.s.retry.backoff(attempt)
		}
		if len(again) == 0 || !sleep(ctx, wait) {
			return whole, errors.Join(errs...)
		}
		c.s.logger.LogAttrs(ctx, slog.LevelDebug, "client: retrying",
			slog.Int("attempt", attempt+1), slog.Int("calls", len(again)),
			slog.String("method", again[0].method), slog.Duration("after", wait),
			slog.String("error", again[0].err.Error()))
		send = again
	}
}

// retries returns the calls of the attempt just made that are to be sent
// again, and the longest wait the server asked for among them.
func (c *Client) retries(ctx context.Context, sent []*call, attempt int, whole error) ([]*call, time.Duration) {
	if attempt >= c.s.retry.MaxAttempts || ctx.Err() != nil || c.closed.Load() {
		return nil, 0
	}
	var again []*call
	var wait time.Duration
	for _, cl := range sent {
		if cl.id == "" {
			if whole != nil {
				// The message failed with a notification in it: the
				// notification is never sent twice, so neither is the
				// message.
				return nil, 0
			}
			continue
		}
		ok, after := retryAdvice(cl.err)
		if ok {
			again = append(again, cl)
			wait = max(wait, after)
		}
	}
	return again, wait
}

// errWait is the cause of a context that ended because a call's timeout
// and grace passed.
var errWait = errors.New("client: waited past the timeout")

// once sends calls as one message and gives each its outcome.
func (c *Client) once(ctx context.Context, calls []*call, batch bool, timeout time.Duration) (whole, problems error) {
	for _, cl := range calls {
		cl.result, cl.err = nil, nil
	}
	m, err := encode(calls, batch, timeout)
	if err == nil {
		wctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeoutCause(ctx, timeout+c.s.grace, errWait)
			defer cancel()
		}
		var rs []schema.Response
		if rs, err = c.t.roundTrip(wctx, m); err == nil {
			w, p := match(calls, rs)
			if w != nil {
				return w, p
			}
			return nil, p
		}
		err = c.waitError(ctx, wctx, err, timeout)
	}
	for _, cl := range calls {
		cl.err = err
	}
	return err, nil
}

// waitError says why a round trip failed: ctx ended, the call's own
// timeout passed, or the transport failed.
func (c *Client) waitError(ctx, wctx context.Context, err error, timeout time.Duration) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("client: waiting for the answer: %w", context.Cause(ctx))
	case wctx.Err() != nil && errors.Is(context.Cause(wctx), errWait):
		se := schema.NewError(schema.CodeTimeout,
			fmt.Sprintf("timed out: no answer within the timeout of %s and %s of grace", timeout, c.s.grace),
			map[string]any{"retryable": true, "timeout_ms": timeout.Milliseconds(), "client_side": true})
		return fmt.Errorf("client: %w: %w", se, context.DeadlineExceeded)
	}
	return err
}
