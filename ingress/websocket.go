package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/schema"
)

// CancelMethod is the method with which a WebSocket client cancels one of
// its calls in flight: params {"id": <the call's id>}, matched byte for byte
// with the id the call was sent with. The call is answered -32004; the
// rpc.cancel request itself is answered {"canceled": true} when a call of
// the connection with that id was in flight, {"canceled": false} when none
// was.
const CancelMethod = "rpc.cancel"

// Causes with which the context of a WebSocket call ends. The dispatcher
// answers every one of them -32004.
var (
	errCanceledByClient = errors.New("ingress: canceled by " + CancelMethod)
	errConnClosed       = errors.New("ingress: websocket connection closed")
	errDeadPeer         = errors.New("ingress: websocket peer missed its pongs")
	errShutdown         = errors.New("ingress: server shut down")
)

// slowReader is why a connection whose client does not read its answers
// was closed: the limit it reached.
type slowReader struct {
	limit  string
	detail string
}

func (e *slowReader) Error() string { return "ingress: " + e.detail + " (" + e.limit + ")" }

// wsOverloadRetryAfter is the wait a connection over its in-flight cap
// suggests: about the time a short call takes.
const wsOverloadRetryAfter = 100 * time.Millisecond

// wsConn is one WebSocket connection. Its reading goroutine is the
// handler's; every call runs on a goroutine of its own, and the handler
// returns only when all of them and the pinger have.
type wsConn struct {
	s   *Server
	c   *websocket.Conn
	hdr callHeaders // Toolbus-Timeout and Prefer at the upgrade
	// stop closes the connection: it ends the context that reading,
	// writing and pinging run under. Calls do not run under that context;
	// closeCalls cancels them one by one.
	stop context.CancelCauseFunc
	done chan struct{} // closed when the handler returns
	wg   sync.WaitGroup

	writeMu sync.Mutex // one message written at a time

	mu       sync.Mutex
	flights  map[string][]*flight // calls in flight by id, for rpc.cancel
	inFlight int                  // calls in flight, notifications included, and messages in backlog
	unsent   int64                // bytes of answers waiting to be written
	closed   bool                 // no call is admitted any more
	draining bool                 // shutting down: new calls are refused
	// backlog holds the messages read but not planned yet, in the order
	// they came, while planning is set: a goroutine plans them one after
	// the other, each after its caller's turn (see [wsConn.take]).
	backlog  [][]byte
	planning bool
	goAway   sync.Once
	slowOnce sync.Once

	messages int          // for the log line; read and written by the reading goroutine only
	calls    atomic.Int64 // for the log line
}

// flight is one call of a connection in flight.
type flight struct {
	id     json.RawMessage
	cancel context.CancelCauseFunc
}

// stopCall ends the call's context with cause, which makes the dispatcher
// answer it -32004. Every cancellation of a WebSocket call, by rpc.cancel or
// by its connection closing, starts here and only here; a bus-level cancel
// to the worker belongs here too.
func (f *flight) stopCall(cause error) { f.cancel(cause) }

// serveWebSocket upgrades GET /rpc and serves the connection until it
// closes. The Toolbus-Timeout header of the upgrade applies to every call of
// the connection.
func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	hdr, terr := s.callHeaders(r)
	if terr != nil {
		s.logRequest(r, "websocket", start, s.refuse(w, http.StatusBadRequest, terr))
		return
	}
	if s.closing.Load() {
		s.logRequest(r, "websocket", start, s.refuse(w, http.StatusServiceUnavailable, shuttingDown()))
		return
	}
	// A hijacked connection keeps the deadlines of the HTTP server; a
	// WebSocket lives as long as its pongs come back. A recorder in tests
	// cannot set them, which does not matter there.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.origins})
	if err != nil {
		// Accept has answered the request (403 for a foreign origin).
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "websocket refused",
			slog.String("remote", r.RemoteAddr), slog.String("reason", err.Error()))
		return
	}
	// One byte over the limit is read, to tell a message at the limit
	// from one over it.
	c.SetReadLimit(s.cfg.limits.MaxBodyBytes + 1)

	// The connection, not the upgrade request, bounds the calls: it
	// keeps the request's values but ends when the connection does.
	ctx, stop := context.WithCancelCause(context.WithoutCancel(r.Context()))
	cn := &wsConn{s: s, c: c, hdr: hdr, stop: stop, done: make(chan struct{}),
		flights: map[string][]*flight{}}
	if !s.track(cn) {
		c.Close(websocket.StatusGoingAway, "server shutting down")
		stop(errShutdown)
		return
	}
	defer s.untrack(cn)
	defer close(cn.done)

	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		cn.ping(ctx)
	}()
	reason := cn.read(ctx)
	cn.stop(reason)
	cn.closeCalls(reason)
	cn.wg.Wait()
	c.CloseNow()

	s.log.LogAttrs(r.Context(), slog.LevelInfo, "websocket",
		slog.Int("messages", cn.messages), slog.Int64("calls", cn.calls.Load()),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000), slog.String("remote", r.RemoteAddr),
		slog.String("reason", reason.Error()))
}

// read reads and handles messages until the connection ends, and returns
// why it did.
func (cn *wsConn) read(ctx context.Context) error {
	max := cn.s.cfg.limits.MaxBodyBytes
	for {
		typ, rd, err := cn.c.Reader(ctx)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			if websocket.CloseStatus(err) != -1 {
				return errConnClosed
			}
			return fmt.Errorf("read: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(rd, max+1))
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		cn.messages++
		if int64(len(body)) > max {
			cn.write(ctx, []response{{Response: schema.Response{Error: schema.LimitError("max_body_bytes", max, -1)}}}, false)
			cn.c.Close(websocket.StatusMessageTooBig, "max_body_bytes")
			return errors.New("message over max_body_bytes")
		}
		if typ != websocket.MessageText {
			cn.write(ctx, []response{{Response: schema.Response{Error: schema.NewError(schema.CodeInvalidRequest,
				"invalid request: JSON-RPC messages go in text frames", nil)}}}, false)
			continue
		}
		cn.take(ctx, body)
	}
}

// take plans a message read from the connection, in the order the
// messages came. A message waits for its caller's turn before it is
// parsed, as a POST body does (see [WithFairness]), so that parsing a
// caller's large batch is work done in that caller's share; one request
// under [parseAtOnce] does not, so that rpc.cancel never waits behind
// the caller's own queue. The reading goroutine never waits: it has to
// go on reading for the pongs to arrive. A message that can be planned
// at once, with none waiting before it, is planned on it; the others
// wait in the connection's backlog, which a goroutine of its own plans,
// and which counts against the connection's in-flight cap: a message
// past the cap is refused whole.
func (cn *wsConn) take(ctx context.Context, body []byte) {
	turn := cn.s.cfg.fair != nil && !parsesAtOnce(body)
	cn.mu.Lock()
	if !turn && !cn.planning {
		cn.mu.Unlock()
		cn.message(ctx, cn.hdr, body, noTurn)
		return
	}
	if cn.closed || cn.draining || cn.inFlight >= cn.s.cfg.wsMaxInFlight {
		refusal := cn.refusal()
		cn.mu.Unlock()
		if limit := limitOf(refusal); limit != "" {
			cn.s.countRefusal(limit)
		}
		cn.write(ctx, []response{{Response: schema.Response{Error: refusal}}}, false)
		return
	}
	cn.inFlight++
	cn.backlog = append(cn.backlog, body)
	start := !cn.planning
	cn.planning = true
	cn.mu.Unlock()
	if start {
		cn.wg.Go(func() { cn.planBacklog(ctx) })
	}
}

// planBacklog plans the messages of the backlog one after the other,
// each after its caller's turn when it needs one, until the backlog is
// empty.
func (cn *wsConn) planBacklog(ctx context.Context) {
	for {
		cn.mu.Lock()
		if len(cn.backlog) == 0 {
			cn.planning = false
			cn.mu.Unlock()
			return
		}
		body := cn.backlog[0]
		cn.backlog[0] = nil
		cn.backlog = cn.backlog[1:]
		cn.mu.Unlock()
		hdr, endTurn := cn.hdr, noTurn
		var e *schema.Error
		if cn.s.cfg.fair != nil && !parsesAtOnce(body) {
			hdr, endTurn, e = cn.s.awaitTurn(ctx, cn.hdr, body)
		}
		// The message's place under the in-flight cap goes to its calls.
		cn.mu.Lock()
		cn.inFlight--
		cn.mu.Unlock()
		if e != nil {
			cn.write(ctx, []response{{Response: schema.Response{Error: e}}}, false)
		} else {
			cn.message(ctx, hdr, body, endTurn)
		}
		cn.closeIfIdle()
	}
}

// refusal is the answer to a message or call the connection takes no
// more of: it is shutting down, or at its in-flight cap. cn.mu is held.
func (cn *wsConn) refusal() *schema.Error {
	if cn.closed || cn.draining {
		return shuttingDown()
	}
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: %d calls in flight on this connection (ws_max_in_flight)", cn.s.cfg.wsMaxInFlight),
		map[string]any{"retryable": true, "retry_after_ms": wsOverloadRetryAfter.Milliseconds(), "limit": "ws_max_in_flight"})
}

// message handles one message, sent with hdr, whose turn endTurn ends
// once it is planned: the answers the ingress has at once are sent, or
// kept for the batch's array, and every call starts on its own goroutine
// under a context of its own, handed to the dispatcher alone, so that
// rpc.cancel can end it alone. The connection's in-flight cap bounds
// them, in place of the aggregator's cap on the calls of one batch.
func (cn *wsConn) message(ctx context.Context, hdr callHeaders, body []byte, endTurn func()) {
	elems, batch, perr := cn.s.parse(body)
	if perr != nil {
		endTurn()
		cn.write(ctx, []response{{Response: schema.Response{Error: perr}}}, false)
		return
	}
	local := map[string]localMethod{CancelMethod: {serve: cn.cancelCall, own: true}}
	cn.subscribeMethods(ctx, local)
	p := cn.s.plan(elems, hdr, local)
	endTurn()
	cn.calls.Add(int64(len(p.calls)))
	if len(p.calls) == 0 {
		if len(p.out) > 0 {
			cn.write(ctx, p.out, batch)
		}
		p.done()
		return
	}
	// A single request's answer goes out alone; a batch's answers wait
	// for each other and go out as one array. Until they are written they
	// count against the connection's unsent bytes and the caller's budget.
	var mu sync.Mutex
	waiting := p.answers()
	var held int64 // the bytes of the batch's answers
	if waiting == 0 {
		if len(p.out) > 0 {
			cn.write(ctx, p.out, batch) // the batch's calls are all notifications
		}
		p.done()
	}
	deliver := func(slot int, r schema.Response) {
		if slot < 0 {
			return
		}
		n := quota.AnswerSize(r)
		cn.hold(n)
		mu.Lock()
		p.out[slot].Response = r
		waiting--
		held += n
		last := waiting == 0
		mu.Unlock()
		switch {
		case !batch:
			cn.write(ctx, p.out[slot:slot+1], false)
			cn.free(n)
			p.done()
		case last:
			cn.write(ctx, p.out, true)
			cn.free(held)
			p.done()
		}
	}
	for i := range p.calls {
		c, slot := p.calls[i], p.slots[i]
		callCtx, f, refusal := cn.admit(ctx, &c)
		if refusal != nil {
			if c.IsNotification() {
				cn.s.log.LogAttrs(ctx, slog.LevelWarn, "websocket notification dropped",
					slog.String("method", c.Method), slog.String("reason", refusal.Message))
			}
			deliver(slot, schema.Response{ID: c.ID, Error: refusal})
			continue
		}
		cn.wg.Add(1)
		go func() {
			defer cn.wg.Done()
			var answer schema.Response
			cn.s.stream(callCtx, []schema.Call{c}, p.charge, func(_ int, r schema.Response) { answer = r })
			cn.land(f)
			deliver(slot, answer)
			cn.release()
		}()
	}
}

// admit registers a call as in flight and returns the context it runs
// under, or the error it is answered with when the connection is at its
// in-flight cap or shutting down.
func (cn *wsConn) admit(ctx context.Context, c *schema.Call) (context.Context, *flight, *schema.Error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed || cn.draining || cn.inFlight >= cn.s.cfg.wsMaxInFlight {
		return nil, nil, cn.refusal()
	}
	cn.inFlight++
	// A call's context keeps the connection's values but ends only
	// through its flight's stopCall, the one place cancellation starts.
	callCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	f := &flight{id: c.ID, cancel: cancel}
	key := string(c.ID) // a notification's is "", which no rpc.cancel names
	cn.flights[key] = append(cn.flights[key], f)
	return callCtx, f, nil
}

// land takes a call that has its answer off the cancelable list: rpc.cancel
// from now on finds nothing to cancel. Its context is released.
func (cn *wsConn) land(f *flight) {
	cn.mu.Lock()
	key := string(f.id)
	fs := cn.flights[key]
	for i, g := range fs {
		if g == f {
			fs = append(fs[:i], fs[i+1:]...)
			break
		}
	}
	if len(fs) == 0 {
		delete(cn.flights, key)
	} else {
		cn.flights[key] = fs
	}
	cn.mu.Unlock()
	f.cancel(nil) // the call is over; this frees its context
}

// release frees a call's in-flight slot once its answer is written, so
// that a peer that does not read its answers soon has no slot left. The
// last call of a draining connection closes it.
func (cn *wsConn) release() {
	cn.mu.Lock()
	cn.inFlight--
	cn.mu.Unlock()
	cn.closeIfIdle()
}

// closeIfIdle closes a draining connection that has nothing in flight.
func (cn *wsConn) closeIfIdle() {
	cn.mu.Lock()
	idle := cn.draining && cn.inFlight == 0
	cn.mu.Unlock()
	if idle {
		cn.closeGoingAway()
	}
}

// cancelCall serves rpc.cancel.
func (cn *wsConn) cancelCall(req schema.Call) (json.RawMessage, *schema.Error) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if len(req.Params) == 0 || req.Params[0] != '{' || json.Unmarshal(req.Params, &p) != nil || len(p.ID) == 0 {
		return nil, schema.NewError(schema.CodeInvalidParams,
			`invalid params: `+CancelMethod+` takes {"id": <the id of a call in flight>}`,
			map[string]any{"field": "id"})
	}
	cn.mu.Lock()
	fs := cn.flights[string(p.ID)]
	for _, f := range fs {
		f.stopCall(errCanceledByClient)
	}
	cn.mu.Unlock()
	if len(fs) > 0 {
		return json.RawMessage(`{"canceled":true}`), nil
	}
	return json.RawMessage(`{"canceled":false}`), nil
}

// closeCalls cancels every call in flight and admits no more.
func (cn *wsConn) closeCalls(cause error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cn.closed = true
	for _, fs := range cn.flights {
		for _, f := range fs {
			f.stopCall(cause)
		}
	}
}

// hold counts n bytes of an answer waiting to be written; past the
// connection's budget the connection is closed, its calls canceled: its
// client does not read what it asked for.
func (cn *wsConn) hold(n int64) {
	cn.mu.Lock()
	cn.unsent += n
	over := cn.unsent > cn.s.cfg.wsMaxUnsent
	cn.mu.Unlock()
	if over {
		cn.slow(&slowReader{limit: "ws_max_unsent_bytes", detail: fmt.Sprintf(
			"the client left more than %d bytes of answers unread", cn.s.cfg.wsMaxUnsent)})
	}
}

// free takes n bytes of answers written (or dropped) off the count.
func (cn *wsConn) free(n int64) {
	cn.mu.Lock()
	cn.unsent -= n
	cn.mu.Unlock()
}

// slow closes the connection of a client that does not read, once.
func (cn *wsConn) slow(cause *slowReader) {
	cn.slowOnce.Do(func() {
		cn.s.countRefusal(cause.limit)
		cn.stop(cause)
	})
}

// write sends one message: an answer, or a batch's array. A message that
// cannot be written within the write timeout closes the connection.
func (cn *wsConn) write(ctx context.Context, rs []response, batch bool) {
	b, err := appendResponses(nil, rs, batch, cn.s.yield)
	if err != nil {
		cn.s.log.LogAttrs(ctx, slog.LevelError, "encode response", slog.String("error", err.Error()))
		b, _ = schema.Response{Error: internalError()}.AppendJSON(nil)
	}
	cn.send(ctx, b)
}

// send writes one message under the write timeout.
func (cn *wsConn) send(ctx context.Context, b []byte) {
	if ctx.Err() != nil {
		return // closed: the message can go nowhere
	}
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	timeout := cn.s.cfg.wsWriteTimeout
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := cn.c.Write(wctx, websocket.MessageText, b)
	switch {
	case errors.Is(wctx.Err(), context.DeadlineExceeded):
		// The library closes the connection when a write's context runs
		// out, even when the write got through at that very moment; the
		// reading side may notice it first.
		cn.slow(&slowReader{limit: "ws_write_timeout", detail: fmt.Sprintf(
			"the client did not take a message of %d bytes within %v", len(b), timeout)})
	case err != nil:
		cn.stop(fmt.Errorf("write: %w", err))
	}
}

// ping pings the peer every interval and closes the connection after the
// configured number of pongs in a row did not come back within an interval.
func (cn *wsConn) ping(ctx context.Context) {
	interval, misses := cn.s.cfg.pingInterval, cn.s.cfg.pingMisses
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := cn.c.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			missed = 0
		case ctx.Err() != nil:
			return
		default:
			missed++
			if missed >= misses {
				cn.stop(errDeadPeer)
				return
			}
		}
	}
}

// closeGoingAway closes a drained connection with the close handshake.
func (cn *wsConn) closeGoingAway() {
	cn.goAway.Do(func() {
		cn.c.Close(websocket.StatusGoingAway, "server shutting down")
	})
}

// drain refuses the connection's new calls and closes it once the calls in
// flight are answered.
func (cn *wsConn) drain() {
	cn.mu.Lock()
	cn.draining = true
	idle := cn.inFlight == 0
	cn.mu.Unlock()
	if idle {
		cn.closeGoingAway()
	}
}

// shuttingDown is the answer to a call that arrives while the server shuts
// down: retryable, on another replica.
func shuttingDown() *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: the server is shutting down",
		map[string]any{"retryable": true, "reason": schema.ReasonShuttingDown})
}

// track adds a connection to those Shutdown drains; it fails once Shutdown
// has started.
func (s *Server) track(cn *wsConn) bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.ws[cn] = struct{}{}
	return true
}

func (s *Server) untrack(cn *wsConn) {
	s.wsMu.Lock()
	delete(s.ws, cn)
	s.wsMu.Unlock()
}

// drainWebSockets drains every WebSocket connection and waits until all are
// closed or ctx ends; then it closes those left, canceling their calls.
// The HTTP server does not know hijacked connections, so Shutdown calls
// this beside it.
func (s *Server) drainWebSockets(ctx context.Context) error {
	s.wsMu.Lock()
	conns := make([]*wsConn, 0, len(s.ws))
	for cn := range s.ws {
		conns = append(conns, cn)
	}
	s.wsMu.Unlock()
	var wg sync.WaitGroup
	var forced atomic.Bool
	for _, cn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Close waits for the peer's close frame, at most a few
			// seconds; stop ends the wait when ctx ends first.
			stop := context.AfterFunc(ctx, func() {
				forced.Store(true)
				cn.stop(errShutdown)
			})
			defer stop()
			cn.drain()
			<-cn.done
		}()
	}
	wg.Wait()
	if forced.Load() {
		return ctx.Err()
	}
	return nil
}
