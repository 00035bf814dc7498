package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// wsServer is a small JSON-RPC server over WebSocket for the tests: echo
// answers the params, sleep {"ms"} answers after a while (and tells
// sleeping when it begins), and every message is handled on its own, so
// answers come in the order they are ready. A batch is answered with one array, in reverse order. It can stop
// answering pings, and be stopped and started again on the same address.
type wsServer struct {
	t       *testing.T
	addr    string
	pong    atomic.Bool // answer pings
	accepts atomic.Int32
	// sleeping receives a value for each sleep call the server begins.
	sleeping chan struct{}

	mu      sync.Mutex
	srv     *http.Server
	conns   map[*websocket.Conn]bool
	cancels []string // ids of rpc.cancel notifications received
	wg      sync.WaitGroup
}

func startWS(t *testing.T) *wsServer {
	t.Helper()
	s := &wsServer{t: t, addr: "127.0.0.1:0", conns: make(map[*websocket.Conn]bool), sleeping: make(chan struct{}, 16)}
	s.pong.Store(true)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *wsServer) url() string { return "ws://" + s.addr + "/rpc" }

func (s *wsServer) start() {
	s.t.Helper()
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen: %v", err)
	}
	s.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.wg.Go(func() { srv.Serve(l) })
}

// stop closes the listener and drops every connection at once, as a
// crashed server would.
func (s *wsServer) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	for c := range s.conns {
		c.CloseNow()
	}
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	s.wg.Wait()
}

func (s *wsServer) serve(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OnPingReceived: func(context.Context, []byte) bool { return s.pong.Load() },
	})
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.srv == nil {
		s.mu.Unlock()
		conn.CloseNow()
		return
	}
	s.accepts.Add(1)
	s.conns[conn] = true
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.CloseNow()
	}()
	// The request's context does not end with a hijacked connection: this
	// one does, so that handlers still sleeping stop.
	var handlers sync.WaitGroup
	defer handlers.Wait()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		handlers.Go(func() { s.handle(ctx, conn, data) })
	}
}

func (s *wsServer) handle(ctx context.Context, conn *websocket.Conn, data []byte) {
	items, batch, perr := schema.Parse(data, schema.Limits{})
	if perr != nil {
		body, _ := schema.Response{Error: perr}.MarshalJSON()
		conn.Write(ctx, websocket.MessageText, body)
		return
	}
	var rs []schema.Response
	for _, it := range items {
		req := it.Request
		if req.Method == "rpc.cancel" {
			var p struct{ ID string }
			json.Unmarshal(req.Params, &p)
			s.mu.Lock()
			s.cancels = append(s.cancels, p.ID)
			s.mu.Unlock()
		}
		if req.IsNotification() {
			continue
		}
		if req.Method == "sleep" {
			var p struct{ MS int }
			json.Unmarshal(req.Params, &p)
			select {
			case s.sleeping <- struct{}{}:
			default:
			}
			select {
			case <-time.After(time.Duration(p.MS) * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
		rs = append(rs, result(req.ID, req.Params))
	}
	var body []byte
	switch {
	case len(rs) == 0:
		return
	case batch:
		slices.Reverse(rs)
		body, _ = schema.AppendBatch(nil, rs)
	default:
		body, _ = rs[0].MarshalJSON()
	}
	conn.Write(ctx, websocket.MessageText, body)
}

// pingAll pings every client connected and waits for their pongs.
func (s *wsServer) pingAll(ctx context.Context) error {
	s.mu.Lock()
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	if len(conns) == 0 {
		return errors.New("no connection")
	}
	for _, c := range conns {
		if err := c.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitSleeping waits until the server has begun a sleep call.
func (s *wsServer) waitSleeping(t *testing.T) {
	t.Helper()
	select {
	case <-s.sleeping:
	case <-time.After(10 * time.Second):
		t.Fatal("the server got no sleep call within 10s")
	}
}

func (s *wsServer) canceled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cancels)
}

// dialWS dials s with test-sized pings and backoff.
func dialWS(t *testing.T, s *wsServer, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	opts = append([]client.Option{
		client.WithPingInterval(time.Second),
		client.WithReconnectBackoff(20*time.Millisecond, 100*time.Millisecond),
	}, opts...)
	c, err := client.Dial(ctx, s.url(), opts...)
	if err != nil {
		t.Fatalf("Dial(%s) = %v", s.url(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestWebSocket(t *testing.T) {
	s := startWS(t)
	c := dialWS(t, s, client.WithTimeoutGrace(100*time.Millisecond))
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "call", run: func(t *testing.T) {
			var got map[string]string
			if err := c.Call(t.Context(), "echo", map[string]string{"hello": "world"}, &got); err != nil || got["hello"] != "world" {
				t.Fatalf("Call(echo) = %v, %v, want map[hello:world]", got, err)
			}
		}},
		{name: "notify", run: func(t *testing.T) {
			if err := c.Notify(t.Context(), "echo", []int{1}); err != nil {
				t.Fatalf("Notify = %v", err)
			}
		}},
		{name: "answers the server's pings", run: func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if err := s.pingAll(ctx); err != nil {
				t.Fatalf("server ping = %v, want a pong", err)
			}
		}},
		{name: "batch answered out of order", run: func(t *testing.T) {
			b := c.Batch()
			var fs []*client.Future
			for i := range 5 {
				fs = append(fs, b.Add("echo", []int{i}))
			}
			b.Notify("echo", []int{99})
			if err := b.Send(t.Context()); err != nil {
				t.Fatalf("Send = %v", err)
			}
			for i, f := range fs {
				var got []int
				if err := f.Decode(&got); err != nil || len(got) != 1 || got[0] != i {
					t.Errorf("call %d = %v, %v, want [%d]", i, got, err, i)
				}
			}
		}},
		{name: "answers as soon as ready", run: func(t *testing.T) {
			done := make(chan int, 2)
			var wg sync.WaitGroup
			for i, ms := range []int{400, 10} {
				wg.Go(func() {
					if err := c.Call(t.Context(), "sleep", map[string]int{"ms": ms}, nil); err != nil {
						t.Errorf("Call(sleep %d) = %v", ms, err)
					}
					done <- i
				})
			}
			wg.Wait()
			if first := <-done; first != 1 {
				t.Errorf("call %d finished first, want the short one", first)
			}
		}},
		{name: "concurrent calls on one connection", run: func(t *testing.T) {
			var wg sync.WaitGroup
			for i := range 200 {
				wg.Go(func() {
					var got struct{ I, MS int }
					if err := c.Call(t.Context(), "sleep", map[string]int{"i": i, "ms": (i * 7) % 30}, &got); err != nil || got.I != i {
						t.Errorf("call %d = %+v, %v", i, got, err)
					}
				})
			}
			wg.Wait()
		}},
		{name: "timeout cancels the call on the server", run: func(t *testing.T) {
			b := c.Batch(client.Timeout(50 * time.Millisecond))
			f := b.Add("sleep", map[string]int{"ms": 5000})
			start := time.Now()
			b.Send(t.Context())
			if err := f.Err(); !errors.Is(err, schema.ErrTimeout) {
				t.Fatalf("Err() = %v, want %v", err, schema.ErrTimeout)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("gave up after %s, want about 50ms plus the grace", d)
			}
			toolbustest.Eventually(t, func() bool { return slices.Contains(s.canceled(), f.ID()) }, "the server receives rpc.cancel for "+f.ID())
		}},
	} {
		t.Run(tc.name, tc.run)
	}
	if n := s.accepts.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}
}

// TestWebSocketDeadPeer stops answering pings: the client finds the
// connection dead, fails the call waiting on it with a retryable error,
// and connects again.
func TestWebSocketDeadPeer(t *testing.T) {
	s := startWS(t)
	c := dialWS(t, s, client.WithPingInterval(100*time.Millisecond))
	if err := c.Call(t.Context(), "echo", nil, nil); err != nil {
		t.Fatalf("Call = %v", err)
	}
	s.pong.Store(false)
	start := time.Now()
	err := c.Call(t.Context(), "sleep", map[string]int{"ms": 10000}, nil)
	var te *client.TransportError
	if !errors.As(err, &te) || !te.Retryable || !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("Call on a dead connection = %v, want a retryable *TransportError wrapping %v", err, client.ErrConnectionLost)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("dead peer found after %s, want within a few ping intervals", d)
	}
	s.pong.Store(true)
	if err := c.Call(t.Context(), "echo", nil, nil); err != nil {
		t.Fatalf("Call after reconnecting = %v", err)
	}
	if n := s.accepts.Load(); n < 2 {
		t.Errorf("server accepted %d connections, want a new one", n)
	}
}

// logRecorder keeps the retry_in of every "dial failed" record.
type logRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "client: dial failed" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			l.mu.Lock()
			l.delays = append(l.delays, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestWebSocketReconnect restarts the server: the call in flight fails,
// the client dials again with a growing backoff, and a call made while it
// is disconnected waits and goes through once the server is back.
func TestWebSocketReconnect(t *testing.T) {
	s := startWS(t)
	rec := &logRecorder{}
	c := dialWS(t, s, client.WithLogger(slog.New(rec)))
	inFlight := make(chan error, 1)
	go func() { inFlight <- c.Call(t.Context(), "sleep", map[string]int{"ms": 10000}, nil) }()
	s.waitSleeping(t)

	s.stop()
	if err := <-inFlight; !errors.Is(err, client.ErrConnectionLost) {
		t.Fatalf("call in flight when the server stopped = %v, want %v", err, client.ErrConnectionLost)
	}
	waiting := make(chan error, 1)
	go func() {
		var got []int
		err := c.Call(t.Context(), "echo", []int{5}, &got, client.Timeout(5*time.Second))
		if err == nil && (len(got) != 1 || got[0] != 5) {
			err = errors.New("wrong result")
		}
		waiting <- err
	}()
	// The server comes back once the client has failed to dial a few
	// times, so that the backoff shows.
	toolbustest.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.delays) >= 3
	}, "three dials fail")
	s.start()
	if err := <-waiting; err != nil {
		t.Fatalf("call made while disconnected = %v, want it to wait for the reconnection", err)
	}
	if n := s.accepts.Load(); n != 2 {
		t.Errorf("server accepted %d connections, want 2", n)
	}
	rec.mu.Lock()
	delays := slices.Clone(rec.delays)
	rec.mu.Unlock()
	if len(delays) < 3 {
		t.Fatalf("dial failures logged with waits %v, want several", delays)
	}
	want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond}
	for i, d := range delays {
		if w := want[min(i, len(want)-1)]; d != w {
			t.Errorf("wait after dial failure %d = %s, want %s (backoff doubling to the maximum)", i+1, d, w)
		}
	}
}

func TestWebSocketClose(t *testing.T) {
	s := startWS(t)
	c := dialWS(t, s)
	inFlight := make(chan error, 1)
	go func() { inFlight <- c.Call(t.Context(), "sleep", map[string]int{"ms": 10000}, nil) }()
	s.waitSleeping(t)
	c.Close()
	if err := <-inFlight; !errors.Is(err, client.ErrClosed) {
		t.Errorf("call in flight at Close = %v, want %v", err, client.ErrClosed)
	}
	if err := c.Call(t.Context(), "echo", nil, nil); !errors.Is(err, client.ErrClosed) {
		t.Errorf("call after Close = %v, want %v", err, client.ErrClosed)
	}
}

// TestWebSocketDialRefused dials an address where nothing listens: Dial
// fails at once, under a context without deadline, naming the address.
func TestWebSocketDialRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + l.Addr().String() + "/rpc"
	l.Close()
	c, err := client.Dial(t.Context(), url)
	if c != nil {
		c.Close()
	}
	var te *client.TransportError
	if !errors.As(err, &te) || te.URL != url || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Dial(%s) = %v, want a refused dial of that URL", url, err)
	}
}

// TestWebSocketDialFails dials a server that hangs up on every connection:
// Dial tries again until its context ends, and says why the last try
// failed.
func TestWebSocketDialFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepts := make(chan struct{}, 16)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
			select {
			case accepts <- struct{}{}:
			default:
			}
		}
	}()
	url := "ws://" + l.Addr().String() + "/rpc"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		// Two hang-ups: the first dial failed and Dial went on.
		for range 2 {
			select {
			case <-accepts:
			case <-ctx.Done():
				return
			}
		}
		cancel()
	}()
	c, err := client.Dial(ctx, url, client.WithReconnectBackoff(time.Millisecond, time.Millisecond))
	if c != nil {
		c.Close()
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrTransport) {
		t.Errorf("Dial(%s) = %v, want the cancellation and the last dial error", url, err)
	}
}

func TestWebSocketAnswerTooLarge(t *testing.T) {
	s := startWS(t)
	c := dialWS(t, s, client.WithMaxResponseBytes(1024))
	err := c.Call(t.Context(), "echo", []string{string(bytes.Repeat([]byte("x"), 4096))}, nil)
	if !errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("Call with a too large answer = %v, want %v", err, client.ErrConnectionLost)
	}
	if err := c.Call(t.Context(), "echo", nil, nil); err != nil {
		t.Errorf("Call after reconnecting = %v", err)
	}
}
