package ingress

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/schema"
)

// dialWS serves s and opens a WebSocket connection to its /rpc with the
// given header pairs. Both are closed when the test ends.
func dialWS(t *testing.T, s *Server, header ...string) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return dialWSOptions(t, s, &websocket.DialOptions{HTTPHeader: h})
}

// dialWSOptions is dialWS with the client's options.
func dialWSOptions(t *testing.T, s *Server, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/rpc", opts)
	if err != nil {
		t.Fatalf("Dial() error = %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("Dial() status = %d, want 101", resp.StatusCode)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func send(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("Write(%s) error = %v", msg, err)
	}
}

// receive reads one message and decodes it as a JSON-RPC answer.
func receive(t *testing.T, c *websocket.Conn) (batch bool, as []answer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("Read() error = %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("message type = %v, want text", typ)
	}
	return decode(t, b)
}

func receiveOne(t *testing.T, c *websocket.Conn) answer {
	t.Helper()
	batch, as := receive(t, c)
	if batch || len(as) != 1 {
		t.Fatalf("got %d answers (batch %v), want one object", len(as), batch)
	}
	return as[0]
}

// TestWebSocketConcurrent checks that a slow call does not hold back the
// answer of a fast one sent after it on the same connection.
func TestWebSocketConcurrent(t *testing.T) {
	s, f := newServer(t)
	c := dialWS(t, s)
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":1}`)
	<-f.entered
	send(t, c, `{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}`)
	if a := receiveOne(t, c); a.ID != "2" || a.Result != "[2]" {
		t.Fatalf("first answer = %+v, want id 2 result [2] while call 1 is blocked", a)
	}
	close(f.release)
	if a := receiveOne(t, c); a.ID != "1" || a.Result != `"released"` {
		t.Errorf("second answer = %+v, want id 1 released", a)
	}
}

func TestWebSocketMessages(t *testing.T) {
	tests := []struct {
		name  string
		msg   string
		batch bool
		want  []answer
	}{
		{name: "single", msg: `{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"x"}`,
			want: []answer{{ID: `"x"`, Result: "19"}}},
		{name: "batch in request order",
			msg: `[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"echo"},` +
				`{"foo":1},{"jsonrpc":"2.0","method":"rpc.other","id":3},{"jsonrpc":"2.0","method":"fail","id":4}]`,
			batch: true,
			want: []answer{{ID: "1", Result: "3"}, {ID: "null", Code: schema.CodeInvalidRequest},
				{ID: "3", Code: schema.CodeMethodNotFound}, {ID: "4", Code: 2001}}},
		{name: "batch without calls", msg: `[{"foo":1},{"jsonrpc":"2.0","method":"echo"}]`, batch: true,
			want: []answer{{ID: "null", Code: schema.CodeInvalidRequest}}},
		{name: "parse error", msg: `{"jsonrpc"`, want: []answer{{ID: "null", Code: schema.CodeParseError}}},
		{name: "empty batch", msg: `[]`, want: []answer{{ID: "null", Code: schema.CodeInvalidRequest}}},
	}
	s, _ := newServer(t)
	c := dialWS(t, s)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send(t, c, tt.msg)
			batch, got := receive(t, c)
			if batch != tt.batch || len(got) != len(tt.want) {
				t.Fatalf("answer %+v (batch %v), want %+v (batch %v)", got, batch, tt.want, tt.batch)
			}
			for i, w := range tt.want {
				if got[i].ID != w.ID || got[i].Result != w.Result || got[i].Code != w.Code {
					t.Errorf("answer %d = %+v, want %+v", i, got[i], w)
				}
			}
		})
	}
	t.Run("notification gets no answer", func(t *testing.T) {
		send(t, c, `{"jsonrpc":"2.0","method":"echo","params":[0]}`)
		send(t, c, `{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}`)
		if a := receiveOne(t, c); a.ID != "1" {
			t.Errorf("answer = %+v, want only id 1's", a)
		}
	})
}

// TestWebSocketCancel checks that rpc.cancel cancels the call it names, and
// only that one, which is answered -32004.
func TestWebSocketCancel(t *testing.T) {
	s, f := newServer(t)
	c := dialWS(t, s)
	send(t, c, `[{"jsonrpc":"2.0","method":"block","id":"a"},{"jsonrpc":"2.0","method":"sleep","params":{"ms":50},"id":"b"}]`)
	<-f.entered
	send(t, c, `{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":"a"},"id":9}`)
	if a := receiveOne(t, c); a.ID != "9" || a.Result != `{"canceled":true}` {
		t.Fatalf("rpc.cancel answer = %+v, want id 9 {\"canceled\":true}", a)
	}
	if err := <-f.ctxErrs; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled call's context error = %v, want %v", err, context.Canceled)
	}
	batch, as := receive(t, c)
	if !batch || len(as) != 2 || as[0].ID != `"a"` || as[0].Code != schema.CodeCanceled ||
		as[1].ID != `"b"` || as[1].Result != `{"slept_ms":50}` {
		t.Errorf("batch answer = %+v, want a -32004 and b's result", as)
	}

	for _, tt := range []struct {
		name, params string
		want         answer
	}{
		{name: "nothing in flight", params: `{"id":"a"}`, want: answer{ID: "1", Result: `{"canceled":false}`}},
		{name: "number id", params: `{"id":1}`, want: answer{ID: "1", Result: `{"canceled":false}`}},
		{name: "no id", params: `{}`, want: answer{ID: "1", Code: schema.CodeInvalidParams}},
		{name: "array", params: `["a"]`, want: answer{ID: "1", Code: schema.CodeInvalidParams}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			send(t, c, `{"jsonrpc":"2.0","method":"rpc.cancel","params":`+tt.params+`,"id":1}`)
			if a := receiveOne(t, c); a.ID != tt.want.ID || a.Result != tt.want.Result || a.Code != tt.want.Code {
				t.Errorf("rpc.cancel %s = %+v, want %+v", tt.params, a, tt.want)
			}
		})
	}
	if got := methods(f.dispatched()); strings.Contains(strings.Join(got, " "), "rpc.") {
		t.Errorf("dispatched %q, want no rpc.* method", got)
	}
}

// TestWebSocketCloseCancels checks that a connection closing cancels the
// calls it has in flight.
func TestWebSocketCloseCancels(t *testing.T) {
	s, f := newServer(t)
	c := dialWS(t, s)
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":1}`)
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":2}`)
	<-f.entered
	<-f.entered
	c.Close(websocket.StatusNormalClosure, "bye")
	for range 2 {
		if err := <-f.ctxErrs; !errors.Is(err, context.Canceled) {
			t.Errorf("dispatcher context error = %v, want %v", err, context.Canceled)
		}
	}
}

// TestWebSocketDeadPeer checks that a peer that stops answering pings is
// closed after the misses, and its calls canceled.
func TestWebSocketDeadPeer(t *testing.T) {
	s, f := newServer(t, WithWebSocketPing(20*time.Millisecond, 10))
	// The peer answers pings until its call is running, so that the
	// server reads the call however long that takes, and is silent from
	// then on. Ten misses in a row, not one late pong of a busy machine,
	// close it.
	var silent atomic.Bool
	c := dialWSOptions(t, s, &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { return !silent.Load() },
	})
	// The client answers pings only while it reads: it reads, and ends
	// closed when the connection does.
	closed := c.CloseRead(context.Background())
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":1}`)
	select {
	case <-f.entered:
	case <-closed.Done():
		t.Fatal("the connection closed before its call ran, while the peer answered pings")
	}
	silent.Store(true)
	select {
	case err := <-f.ctxErrs:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("dispatcher context error = %v, want %v", err, context.Canceled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a peer that answers no pings was not closed")
	}
	select {
	case <-closed.Done():
	case <-time.After(5 * time.Second):
		t.Error("the connection is still open on the client's side")
	}
}

// TestWebSocketAlivePeer checks that a peer that answers pings stays,
// through twice the misses that would close a silent one. A pong late by
// more than an interval is a miss, as a busy machine's can be, so it takes
// ten in a row.
func TestWebSocketAlivePeer(t *testing.T) {
	s, f := newServer(t, WithWebSocketPing(20*time.Millisecond, 10))
	c := dialWS(t, s)
	send(t, c, `{"jsonrpc":"2.0","method":"sleep","params":{"ms":400},"id":1}`)
	if a := receiveOne(t, c); a.Result != `{"slept_ms":400}` {
		t.Errorf("answer = %+v, want the call's result after 20 pings", a)
	}
	select {
	case err := <-f.ctxErrs:
		t.Errorf("call canceled with %v on a live connection", err)
	default:
	}
}

func TestWebSocketInFlightLimit(t *testing.T) {
	s, f := newServer(t, WithWebSocketMaxInFlight(2))
	c := dialWS(t, s)
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":1}`)
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":2}`)
	<-f.entered
	<-f.entered
	send(t, c, `[{"jsonrpc":"2.0","method":"echo","id":3},{"jsonrpc":"2.0","method":"rpc.cancel","params":{"id":9},"id":4}]`)
	batch, as := receive(t, c)
	if !batch || len(as) != 2 {
		t.Fatalf("answer %+v, want two", as)
	}
	if a := as[0]; a.ID != "3" || a.Code != schema.CodeOverloaded || a.Data["limit"] != "ws_max_in_flight" || a.Data["retry_after_ms"] == nil {
		t.Errorf("call over the cap = %+v, want -32002 naming ws_max_in_flight with retry_after_ms", a)
	}
	if a := as[1]; a.Result != `{"canceled":false}` {
		t.Errorf("rpc.cancel at the cap = %+v, want it served", a)
	}
	close(f.release)
	for range 2 {
		if a := receiveOne(t, c); a.Result != `"released"` {
			t.Errorf("answer = %+v, want released", a)
		}
	}
	send(t, c, `{"jsonrpc":"2.0","method":"echo","params":[5],"id":5}`)
	if a := receiveOne(t, c); a.Result != "[5]" {
		t.Errorf("answer after the calls landed = %+v, want [5]", a)
	}
}

func TestWebSocketMessageLimit(t *testing.T) {
	s, f := newServer(t, WithLimits(Limits{MaxBodyBytes: 200}))
	c := dialWS(t, s)
	send(t, c, echoOfSize(200))
	if a := receiveOne(t, c); a.ID != "1" || a.Code != 0 {
		t.Fatalf("message at the limit = %+v, want its result", a)
	}
	send(t, c, echoOfSize(201))
	if a := receiveOne(t, c); a.Code != schema.CodeLimitExceeded || a.Data["limit"] != "max_body_bytes" {
		t.Errorf("message over the limit = %+v, want -32006 naming max_body_bytes", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
		t.Errorf("close status = %v (%v), want %v", got, err, websocket.StatusMessageTooBig)
	}
	if n := len(f.dispatched()); n != 1 {
		t.Errorf("dispatched %d calls, want 1", n)
	}
}

func TestWebSocketTimeoutHeader(t *testing.T) {
	s, f := newServer(t)
	c := dialWS(t, s, schema.HeaderTimeout, "300ms")
	send(t, c, `{"jsonrpc":"2.0","method":"echo","id":1}`)
	receiveOne(t, c)
	if calls := f.dispatched(); len(calls) != 1 || calls[0].Timeout != 300*time.Millisecond {
		t.Errorf("dispatched %+v, want one call with Timeout 300ms", calls)
	}

	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/rpc",
		&websocket.DialOptions{HTTPHeader: http.Header{schema.HeaderTimeout: {"soon"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Dial with a bad %s = %v, %v, want 400", schema.HeaderTimeout, resp, err)
	}
}

func TestWebSocketOrigins(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		origin  string
		wantErr bool
	}{
		{name: "no origin", origin: ""},
		{name: "foreign origin refused", origin: "https://elsewhere.example", wantErr: true},
		{name: "allowed origin", opts: []Option{WithWebSocketOrigins("*.example")}, origin: "https://elsewhere.example"},
		{name: "other origin still refused", opts: []Option{WithWebSocketOrigins("*.example")}, origin: "https://evil.test", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newServer(t, tt.opts...)
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			c, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/rpc",
				&websocket.DialOptions{HTTPHeader: h})
			if err == nil {
				c.Close(websocket.StatusNormalClosure, "")
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("Dial() error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && resp.StatusCode != http.StatusForbidden {
				t.Errorf("status = %d, want 403", resp.StatusCode)
			}
		})
	}
}

// TestWebSocketShutdown checks that Shutdown lets a connection's calls in
// flight answer, refuses new ones, and closes the connection going away.
func TestWebSocketShutdown(t *testing.T) {
	s, f := newServer(t)
	url, _, served := startServer(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/rpc", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send(t, c, `{"jsonrpc":"2.0","method":"block","id":1}`)
	<-f.entered
	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown(ctx) }()
	for {
		// Until Shutdown has reached the connection, calls still run.
		send(t, c, `{"jsonrpc":"2.0","method":"echo","id":2}`)
		if a := receiveOne(t, c); a.Code == schema.CodeUnavailable {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(f.release)
	if a := receiveOne(t, c); a.ID != "1" || a.Result != `"released"` {
		t.Errorf("call in flight = %+v, want its result", a)
	}
	_, _, err = c.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Errorf("close status = %v (%v), want %v", got, err, websocket.StatusGoingAway)
	}
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown() error = %v, want nil", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve() error = %v", err)
	}
}

// TestWebSocketDepthLimit checks that max_depth holds on every WebSocket
// message as on POST /rpc: a message one level deeper than the limit is
// refused with -32006 naming it and dispatches nothing, one at the limit
// is answered, and the connection goes on.
func TestWebSocketDepthLimit(t *testing.T) {
	const maxDepth = 4
	s, f := newServer(t, WithLimits(Limits{MaxDepth: maxDepth}))
	c := dialWS(t, s)
	// The request object is one level; its params bring the rest.
	atLimit := `{"jsonrpc":"2.0","method":"echo","params":[[[1]]],"id":1}`
	send(t, c, `{"jsonrpc":"2.0","method":"echo","params":[[[[1]]]],"id":2}`)
	if a := receiveOne(t, c); a.Code != schema.CodeLimitExceeded || a.Data["limit"] != "max_depth" || a.Data["max"] != float64(maxDepth) {
		t.Errorf("message over the depth limit = %+v, want -32006 naming max_depth with max %d", a, maxDepth)
	}
	send(t, c, "["+atLimit+"]") // the batch's array is one level more
	if a := receiveOne(t, c); a.Code != schema.CodeLimitExceeded || a.Data["limit"] != "max_depth" {
		t.Errorf("batch over the depth limit = %+v, want -32006 naming max_depth", a)
	}
	send(t, c, atLimit)
	if a := receiveOne(t, c); a.ID != "1" || a.Code != 0 || a.Result != "[[[1]]]" {
		t.Errorf("message at the depth limit = %+v, want its result", a)
	}
	if n := len(f.dispatched()); n != 1 {
		t.Errorf("dispatched %d calls, want only the one at the limit", n)
	}
}
