package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/schema"
)

// wsTransport multiplexes the calls of a client over one WebSocket
// connection. One goroutine keeps the connection: it dials, and while a
// connection is up it runs a reader, which hands every answer to the call
// waiting for its ids, and a pinger, which closes a connection whose pongs
// stop. When the connection ends it fails the calls waiting on it and dials
// again after a backoff.
type wsTransport struct {
	url    string
	s      *settings
	cancel context.CancelFunc // stops the keeper goroutine
	done   chan struct{}      // closed by close
	wg     sync.WaitGroup

	mu      sync.Mutex
	conn    *websocket.Conn // nil while disconnected
	up      chan struct{}   // closed when conn is set, replaced when it is lost
	waiters map[string]*waiter
	dialErr error // the last dial failure, while disconnected
	closed  bool

	// firstDone is closed once the first dial has been tried; firstErr is
	// its failure, nil when it connected.
	firstDone chan struct{}
	firstErr  error
}

var _ transport = (*wsTransport)(nil)

// waiter is a message waiting for its answer on one connection.
type waiter struct {
	conn *websocket.Conn
	ids  []string
	ch   chan answer // buffered: whoever answers never blocks
}

type answer struct {
	rs  []schema.Response
	err error
}

func newWSTransport(url string, s *settings) *wsTransport {
	ctx, cancel := context.WithCancel(context.Background())
	t := &wsTransport{
		url:     url,
		s:       s,
		cancel:  cancel,
		done:    make(chan struct{}),
		up:      make(chan struct{}),
		waiters: make(map[string]*waiter),

		firstDone: make(chan struct{}),
	}
	t.wg.Add(1)
	go t.keep(ctx)
	return t
}

// roundTrip sends m on the current connection, waiting for one while the
// client is disconnected, for as long as ctx lets it.
func (t *wsTransport) roundTrip(ctx context.Context, m *message) ([]schema.Response, error) {
	for {
		conn, err := t.connection(ctx)
		if err != nil {
			return nil, err
		}
		var w *waiter
		if len(m.ids) > 0 {
			w = &waiter{conn: conn, ids: m.ids, ch: make(chan answer, 1)}
			if !t.register(w) {
				continue // the connection was lost meanwhile: wait for the next
			}
		}
		if err := t.write(ctx, conn, m.body); err != nil {
			if w != nil {
				t.unregister(w)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &TransportError{Op: "write", URL: t.url, Err: err}
		}
		if w == nil {
			return nil, nil
		}
		select {
		case a := <-w.ch:
			return a.rs, a.err
		case <-ctx.Done():
			if !t.unregister(w) {
				// The answer, or the connection's end, came just now
				// and is on its way: take it rather than lose it.
				a := <-w.ch
				return a.rs, a.err
			}
			t.cancelCalls(ctx, conn, m.ids)
			return nil, ctx.Err()
		}
	}
}

// write sends one text message. A write cut off halfway would leave the
// connection unusable for every call on it, so the write is not bound to
// the caller's cancellation but to the ping interval: a connection that
// cannot take a message in that long is as good as dead.
func (t *wsTransport) write(ctx context.Context, conn *websocket.Conn, body []byte) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.s.pingInterval)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, body)
}

// cancelCalls asks the server, best effort, to cancel calls that the
// client no longer waits for.
func (t *wsTransport) cancelCalls(ctx context.Context, conn *websocket.Conn, ids []string) {
	reqs := make([]wireRequest, len(ids))
	for i, id := range ids {
		params, _ := json.Marshal(map[string]string{"id": id})
		reqs[i] = wireRequest{JSONRPC: schema.Version, Method: "rpc.cancel", Params: params}
	}
	var body []byte
	if len(reqs) == 1 {
		body, _ = json.Marshal(reqs[0])
	} else {
		body, _ = json.Marshal(reqs)
	}
	if err := t.write(ctx, conn, body); err != nil {
		t.s.logger.Debug("client: sending rpc.cancel", "url", t.url, "error", err)
	}
}

// connection returns the current connection, waiting for one while there
// is none.
func (t *wsTransport) connection(ctx context.Context) (*websocket.Conn, error) {
	for {
		t.mu.Lock()
		conn, up, closed := t.conn, t.up, t.closed
		t.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case conn != nil:
			return conn, nil
		}
		select {
		case <-up:
		case <-t.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitFirst waits until a connection is up, for [Dial]. A first dial
// refused outright fails at once: nothing listens at the address, and
// dialing again would only wait for ctx to end.
func (t *wsTransport) waitFirst(ctx context.Context) error {
	select {
	case <-t.firstDone:
		if err := t.firstErr; errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("client: nothing accepts connections at %s (connection refused): start the toolbus ingress there or correct the URL: %w", t.url, err)
		}
	case <-ctx.Done():
	}
	_, err := t.connection(ctx)
	if err == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	t.mu.Lock()
	last := t.dialErr
	t.mu.Unlock()
	if last != nil {
		return fmt.Errorf("client: no connection to %s: %w; last attempt: %w", t.url, err, last)
	}
	return fmt.Errorf("client: no connection to %s: %w", t.url, err)
}

// register records w, unless its connection is already gone.
func (t *wsTransport) register(w *waiter) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.conn != w.conn {
		return false
	}
	for _, id := range w.ids {
		t.waiters[id] = w
	}
	return true
}

// unregister forgets w and reports whether it was still waiting.
func (t *wsTransport) unregister(w *waiter) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forget(w)
}

// forget removes w's ids; t.mu is held.
func (t *wsTransport) forget(w *waiter) bool {
	found := false
	for _, id := range w.ids {
		if t.waiters[id] == w {
			delete(t.waiters, id)
			found = true
		}
	}
	return found
}

// dispatch hands an answer to the message waiting for it: the one whose
// ids its responses carry. A response with a null id can only be an error
// about a whole message; it goes to the one message waiting, or is dropped
// when several are and nothing tells which one it answers.
func (t *wsTransport) dispatch(conn *websocket.Conn, data []byte) {
	rs, err := decodeAnswer(data)
	if err != nil {
		t.s.logger.Warn("client: dropping a message that is not an answer", "url", t.url, "error", err)
		return
	}
	t.mu.Lock()
	var w *waiter
	nullIDs := true
	for _, r := range rs {
		if len(r.ID) != 0 && string(r.ID) != "null" {
			nullIDs = false
		}
		var id string
		if json.Unmarshal(r.ID, &id) == nil {
			if w = t.waiters[id]; w != nil {
				break
			}
		}
	}
	if w == nil && nullIDs {
		for _, other := range t.waiters {
			if other.conn != conn || (w != nil && other != w) {
				w = nil
				break
			}
			w = other
		}
	}
	if w != nil {
		t.forget(w)
	}
	t.mu.Unlock()
	if w == nil {
		t.s.logger.Warn("client: dropping an answer no call waits for", "url", t.url, "answer", snippet(data))
		return
	}
	w.ch <- answer{rs: rs}
}

// keep keeps a connection up until the transport is closed: it dials,
// serves the connection until it ends, and dials again after a wait that
// starts at reconnectMin and doubles with every failed dial up to
// reconnectMax.
func (t *wsTransport) keep(ctx context.Context) {
	defer t.wg.Done()
	delay := t.s.reconnectMin
	first := true
	for {
		conn, err := t.dial(ctx)
		if first {
			t.firstErr, first = err, false
			close(t.firstDone)
		}
		if err == nil {
			delay = t.s.reconnectMin
			cause := t.serve(ctx, conn)
			if ctx.Err() == nil {
				t.s.logger.Warn("client: connection lost", "url", t.url, "error", cause)
			}
		} else if ctx.Err() == nil {
			t.s.logger.Warn("client: dial failed", "url", t.url, "error", err, "retry_in", delay)
		}
		if !sleep(ctx, jitter(delay)) {
			return
		}
		if err != nil {
			delay = min(2*delay, t.s.reconnectMax)
		}
	}
}

// jitter spreads d over [0.75d, 1.25d], so that clients that lost a server
// together do not all come back at the same instant.
func jitter(d time.Duration) time.Duration {
	q := d / 4
	if q <= 0 {
		return d
	}
	return d - q + rand.N(2*q+1)
}

func (t *wsTransport) dial(ctx context.Context) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	header := t.s.header.Clone()
	if t.s.timeout > 0 {
		header.Set(schema.HeaderTimeout, t.s.timeout.String())
	}
	conn, resp, err := websocket.Dial(dctx, t.url, &websocket.DialOptions{HTTPClient: t.s.httpClient, HTTPHeader: header})
	if err != nil {
		te := &TransportError{Op: "dial", URL: t.url, Retryable: true, Err: err}
		if resp != nil {
			te.StatusCode = resp.StatusCode
		}
		t.mu.Lock()
		t.dialErr = te
		t.mu.Unlock()
		return nil, te
	}
	conn.SetReadLimit(t.s.maxBytes)
	return conn, nil
}

// serve runs the reader and the pinger of conn until either fails, then
// fails the calls waiting on conn and closes it.
func (t *wsTransport) serve(ctx context.Context, conn *websocket.Conn) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		conn.CloseNow()
		return ErrClosed
	}
	t.conn, t.dialErr = conn, nil
	close(t.up)
	t.mu.Unlock()
	t.s.logger.Info("client: connected", "url", t.url)

	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errc <- t.read(sctx, conn) })
	wg.Go(func() { errc <- t.ping(sctx, conn) })
	cause := <-errc
	cancel()
	t.lost(conn, cause)
	conn.CloseNow()
	wg.Wait()
	return cause
}

func (t *wsTransport) read(ctx context.Context, conn *websocket.Conn) error {
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		t.dispatch(conn, data)
	}
}

// ping pings the server every interval; a pong that has not come back by
// the next ping ends the connection.
func (t *wsTransport) ping(ctx context.Context, conn *websocket.Conn) error {
	every := t.s.pingInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := conn.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("server missed a pong within %s: %w", every, err)
		}
	}
}

// lost marks conn as gone and fails the calls waiting on it: with a
// retryable [ErrConnectionLost], or [ErrClosed] when the client is closing.
func (t *wsTransport) lost(conn *websocket.Conn, cause error) {
	t.mu.Lock()
	if t.conn == conn {
		t.conn = nil
		t.up = make(chan struct{})
	}
	var failed []*waiter
	for _, w := range t.waiters {
		if w.conn == conn && t.forget(w) {
			failed = append(failed, w)
		}
	}
	closed := t.closed
	t.mu.Unlock()
	var err error = &TransportError{Op: "websocket", URL: t.url, Retryable: true,
		Err: fmt.Errorf("%w: %w", ErrConnectionLost, cause)}
	if closed {
		err = ErrClosed
	}
	for _, w := range failed {
		w.ch <- answer{err: err}
	}
}

// close closes the connection gracefully, stops the keeper and fails every
// call still waiting.
func (t *wsTransport) close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	conn := t.conn
	t.mu.Unlock()
	if conn != nil {
		// The close handshake needs the reader, which is still running.
		conn.Close(websocket.StatusNormalClosure, "client closed")
	}
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	var failed []*waiter
	for _, w := range t.waiters {
		if t.forget(w) {
			failed = append(failed, w)
		}
	}
	t.mu.Unlock()
	for _, w := range failed {
		w.ch <- answer{err: ErrClosed}
	}
	return nil
}
