package ingress

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolbus/toolbus/internal/testwait"
)

// shutdown stops s when the test ends.
func shutdown(t *testing.T, s *Server, served <-chan error) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown() = %v", err)
		}
		<-served
	})
}

// waitUntil waits for cond; ingress's own tests cannot import toolbustest,
// which imports ingress, so they share its implementation this way.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, cond, what)
}

// TestMaxHeaderBytes: headers over the bound are refused 431 before any
// handler runs, and counted under max_header_bytes.
func TestMaxHeaderBytes(t *testing.T) {
	s, _ := newServer(t, WithMaxHeaderBytes(4<<10), WithMetrics(prometheus.NewRegistry()))
	url, c, served := startServer(t, s)
	shutdown(t, s, served)
	send := func(header int) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/rpc", strings.NewReader(`{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Padding", strings.Repeat("a", header))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send(64 << 10); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB of headers: status %d, want 431", got)
	}
	if got := testutil.ToFloat64(s.metrics.refusals.WithLabelValues("max_header_bytes")); got != 1 {
		t.Errorf("refusals{limit=max_header_bytes} = %v, want 1", got)
	}
	if got := send(1 << 10); got != http.StatusOK {
		t.Fatalf("1 KiB of headers: status %d, want 200", got)
	}
}

// TestMaxConnsPerAddr: a client address with its bound of connections open
// gets its next one answered 429 naming max_conns_per_addr, and another
// once one of the first closes.
func TestMaxConnsPerAddr(t *testing.T) {
	s, _ := newServer(t, WithMaxConnsPerAddr(2), WithMetrics(prometheus.NewRegistry()))
	url, _, served := startServer(t, s)
	shutdown(t, s, served)
	addr := strings.TrimPrefix(url, "http://")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitUntil(t, "two connections counted", func() bool { return s.conns.Open() == 2 })

	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil {
		t.Fatalf("read the refusal: %v", err)
	}
	var body struct {
		Error struct {
			Code    int
			Message string
			Data    struct {
				Limit      string `json:"limit"`
				Max        int    `json:"max"`
				RetryAfter int    `json:"retry_after_ms"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		body.Error.Code != -32002 || body.Error.Data.Limit != "max_conns_per_addr" || body.Error.Data.Max != 2 {
		t.Fatalf("third connection: %d %+v, want 429 with Retry-After and -32002 naming max_conns_per_addr", resp.StatusCode, body)
	}
	if got := testutil.ToFloat64(s.metrics.refusals.WithLabelValues("max_conns_per_addr")); got != 1 {
		t.Errorf("refusals{limit=max_conns_per_addr} = %v, want 1", got)
	}

	held[0].Close()
	waitUntil(t, "the closed connection released", func() bool { return s.conns.Open() == 1 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	ok, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	ok.Body.Close()
	if ok.StatusCode != http.StatusOK {
		t.Fatalf("a connection after one closed: %d, want 200", ok.StatusCode)
	}
}

func TestConnOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"tiny header bound", WithMaxHeaderBytes(10)},
		{"negative connections", WithMaxConnsPerAddr(-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(newFake(), tc.opt); err == nil {
				t.Fatal("New succeeded, want an error")
			}
		})
	}
}
