package ingress

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

var twoCallers = auth.Config{Keys: []auth.APIKey{
	{Name: "alice", SHA256: auth.HashAPIKey("a"), Allow: []string{">"}},
	{Name: "bob", SHA256: auth.HashAPIKey("b"), Allow: []string{">"}},
}}

// TestCallerMaxBytesInFlight: a caller whose unwritten answers hold half
// its budget has its new calls refused naming caller_max_bytes_in_flight,
// while another caller's calls go on; once its answers are written it may
// call again.
func TestCallerMaxBytesInFlight(t *testing.T) {
	s, f := newServer(t, WithAuth(twoCallers), WithCallerMaxBytesInFlight(4<<10))
	h := s.Handler()
	held := make(chan []answer, 1)
	go func() {
		rec := serve(h, post(`[{"jsonrpc":"2.0","method":"big","params":{"bytes":2500},"id":1},{"jsonrpc":"2.0","method":"block","id":2}]`, "X-Api-Key", "a"))
		_, as := decode(t, rec.Body.Bytes())
		held <- as
	}()
	<-f.entered
	waitUntil(t, "the first answer held", func() bool { return s.bytes.Total() > 2500 })

	rec := serve(h, post(`{"jsonrpc":"2.0","method":"echo","params":[1],"id":3}`, "X-Api-Key", "a"))
	_, as := decode(t, rec.Body.Bytes())
	if a := as[0]; a.Code != schema.CodeOverloaded || a.Data["limit"] != "caller_max_bytes_in_flight" || a.Data["retry_after_ms"] == nil {
		t.Fatalf("alice's call while her answers wait = %+v, want -32002 naming caller_max_bytes_in_flight", a)
	}
	rec = serve(h, post(`{"jsonrpc":"2.0","method":"echo","params":[1],"id":4}`, "X-Api-Key", "b"))
	if _, as := decode(t, rec.Body.Bytes()); as[0].Result != "[1]" {
		t.Fatalf("bob's call = %+v, want [1]: alice's budget is hers", as[0])
	}
	close(f.release)
	if as := <-held; as[0].Code != 0 || as[1].Result != `"released"` {
		t.Fatalf("alice's batch = %+v, want both answered", as)
	}
	if n := s.bytes.Total(); n != 0 {
		t.Fatalf("bytes held after every answer was written = %d, want 0", n)
	}
	rec = serve(h, post(`{"jsonrpc":"2.0","method":"echo","params":[1],"id":5}`, "X-Api-Key", "a"))
	if _, as := decode(t, rec.Body.Bytes()); as[0].Result != "[1]" {
		t.Fatalf("alice's call after her answers were written = %+v, want [1]", as[0])
	}
}

// TestAnswerOverBudgetDropped: an answer that does not fit the caller's
// budget is replaced by a refusal that says the call ran.
func TestAnswerOverBudgetDropped(t *testing.T) {
	s, _ := newServer(t, WithAuth(twoCallers), WithCallerMaxBytesInFlight(4<<10), WithMetrics(prometheus.NewRegistry()))
	rec := serve(s.Handler(), post(`[{"jsonrpc":"2.0","method":"big","params":{"bytes":2500},"id":1},{"jsonrpc":"2.0","method":"big","params":{"bytes":2500},"id":2}]`, "X-Api-Key", "a"))
	_, as := decode(t, rec.Body.Bytes())
	ok, dropped := 0, 0
	for _, a := range as {
		switch {
		case a.Code == 0:
			ok++
		case a.Code == schema.CodeOverloaded && a.Data["limit"] == "caller_max_bytes_in_flight" && a.Data["may_have_run"] == true:
			dropped++
		default:
			t.Errorf("answer %+v, want a result or -32002 with may_have_run", a)
		}
	}
	if ok != 1 || dropped != 1 {
		t.Fatalf("%d results and %d dropped answers, want one of each", ok, dropped)
	}
	if got := testutil.ToFloat64(s.metrics.refusals.WithLabelValues("caller_max_bytes_in_flight")); got != 1 {
		t.Errorf("refusals{limit=caller_max_bytes_in_flight} = %v, want 1", got)
	}
}

// TestAnonymousCallerHasTheWholeByteBudget: without authentication the one
// caller may hold all of max_bytes_in_flight, whatever a caller's share.
func TestAnonymousCallerHasTheWholeByteBudget(t *testing.T) {
	s, _ := newServer(t, WithMaxBytesInFlight(1<<20), WithCallerMaxBytesInFlight(4<<10))
	rec := serve(s.Handler(), post(`[{"jsonrpc":"2.0","method":"big","params":{"bytes":2500},"id":1},{"jsonrpc":"2.0","method":"big","params":{"bytes":2500},"id":2}]`))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	_, as := decode(t, rec.Body.Bytes())
	for _, a := range as {
		if a.Code != 0 {
			t.Errorf("answer %+v, want a result", a)
		}
	}
}

// floodWS sends n calls of a 1 MiB answer each on a new connection whose
// client then reads nothing, and returns the connection. The server closes
// such a connection, which is what the callers wait for, and may do so
// before the client has sent all n: sending stops at the first write that
// fails, and the callers check why the connection closed.
func floodWS(t *testing.T, s *Server, n int) *websocket.Conn {
	t.Helper()
	c := dialWS(t, s)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"big","params":{"bytes":1048576},"id":`+strconv.Itoa(i)+`}`))
		cancel()
		if err != nil {
			break
		}
	}
	return c
}

// TestWebSocketMaxUnsentBytes: a client that sends calls and reads none
// of their answers is closed once they pass the connection's budget, and
// what they held is given back.
func TestWebSocketMaxUnsentBytes(t *testing.T) {
	s, _ := newServer(t, WithWebSocketMaxUnsentBytes(2<<20), WithMetrics(prometheus.NewRegistry()))
	floodWS(t, s, 64)
	waitUntil(t, "the connection closed at ws_max_unsent_bytes", func() bool {
		return testutil.ToFloat64(s.metrics.refusals.WithLabelValues("ws_max_unsent_bytes")) == 1
	})
	waitUntil(t, "the connection gone", func() bool {
		s.wsMu.Lock()
		defer s.wsMu.Unlock()
		return len(s.ws) == 0
	})
	if n := s.bytes.Total(); n != 0 {
		t.Errorf("bytes held after the connection closed = %d, want 0", n)
	}
}

// TestWebSocketWriteTimeout: a client that does not take a message within
// the write timeout is closed.
func TestWebSocketWriteTimeout(t *testing.T) {
	s, _ := newServer(t, WithWebSocketWriteTimeout(100*time.Millisecond), WithWebSocketMaxUnsentBytes(1<<30), WithMetrics(prometheus.NewRegistry()))
	floodWS(t, s, 64)
	waitUntil(t, "the connection closed at ws_write_timeout", func() bool {
		return testutil.ToFloat64(s.metrics.refusals.WithLabelValues("ws_write_timeout")) == 1
	})
	waitUntil(t, "the connection gone", func() bool {
		s.wsMu.Lock()
		defer s.wsMu.Unlock()
		return len(s.ws) == 0
	})
}

// TestWebSocketReaderKeepsItsConnection: a client that reads its answers
// stays under the budget however much it asks for in all.
func TestWebSocketReaderKeepsItsConnection(t *testing.T) {
	s, _ := newServer(t, WithWebSocketMaxUnsentBytes(4<<20))
	c := dialWS(t, s)
	c.SetReadLimit(2 << 20)
	for i := range 16 {
		send(t, c, `{"jsonrpc":"2.0","method":"big","params":{"bytes":1048576},"id":`+strconv.Itoa(i)+`}`)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := c.Read(ctx)
		cancel()
		if err != nil || len(b) < 1<<20 {
			t.Fatalf("answer %d: %d bytes, %v; want 1 MiB", i, len(b), err)
		}
	}
}
