package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

func TestNewRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		d    schema.Dispatcher
		opts []Option
	}{
		{name: "nil dispatcher", d: nil},
		{name: "negative body limit", d: newFake(), opts: []Option{WithLimits(Limits{MaxBodyBytes: -1})}},
		{name: "negative batch limit", d: newFake(), opts: []Option{WithLimits(Limits{MaxBatchItems: -1})}},
		{name: "negative depth limit", d: newFake(), opts: []Option{WithLimits(Limits{MaxDepth: -1})}},
		{name: "nil logger", d: newFake(), opts: []Option{WithLogger(nil)}},
		{name: "nil readiness", d: newFake(), opts: []Option{WithReadiness(nil)}},
		{name: "zero max timeout", d: newFake(), opts: []Option{WithMaxTimeout(0)}},
		{name: "negative max timeout", d: newFake(), opts: []Option{WithMaxTimeout(-time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.d, tt.opts...)
			if err == nil || s != nil {
				t.Errorf("New() = %v, %v, want nil and an error", s, err)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	s, _ := newServer(t, WithLimits(Limits{MaxBatchItems: 5}), WithMaxTimeout(time.Minute))
	want := Limits{MaxBodyBytes: DefaultMaxBodyBytes, MaxBatchItems: 5, MaxDepth: DefaultMaxDepth}
	if s.cfg.limits != want {
		t.Errorf("limits = %+v, want %+v", s.cfg.limits, want)
	}
	if s.srv.WriteTimeout <= time.Minute {
		t.Errorf("WriteTimeout = %v, want more than the max timeout %v", s.srv.WriteTimeout, time.Minute)
	}
	d, _ := newServer(t)
	if d.srv.WriteTimeout <= DefaultMaxTimeout {
		t.Errorf("default WriteTimeout = %v, want more than %v", d.srv.WriteTimeout, DefaultMaxTimeout)
	}
	if d.srv.ReadHeaderTimeout <= 0 || d.srv.ReadTimeout <= 0 || d.srv.IdleTimeout <= 0 {
		t.Errorf("server timeouts header %v read %v idle %v, want all set",
			d.srv.ReadHeaderTimeout, d.srv.ReadTimeout, d.srv.IdleTimeout)
	}
}

func TestReadiness(t *testing.T) {
	errNATS := errors.New("nats: not connected")
	tests := []struct {
		name       string
		ready      func(context.Context) error
		shutdown   bool
		wantStatus int
		wantReason string
	}{
		{name: "default", wantStatus: 200},
		{name: "check passes", ready: func(context.Context) error { return nil }, wantStatus: 200},
		{name: "check fails", ready: func(context.Context) error { return errNATS }, wantStatus: 503, wantReason: errNATS.Error()},
		{name: "shut down", shutdown: true, wantStatus: 503, wantReason: "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []Option
			if tt.ready != nil {
				opts = append(opts, WithReadiness(tt.ready))
			}
			s, _ := newServer(t, opts...)
			if tt.shutdown {
				if err := s.Shutdown(context.Background()); err != nil {
					t.Fatalf("Shutdown() error = %v", err)
				}
			}
			rec := serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/readyz", nil))
			var body struct{ Status, Reason string }
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("decode %s: %v", rec.Body, err)
			}
			if rec.Code != tt.wantStatus || body.Reason != tt.wantReason {
				t.Errorf("GET /readyz = %d reason %q, want %d reason %q", rec.Code, body.Reason, tt.wantStatus, tt.wantReason)
			}
			if h := serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/healthz", nil)); h.Code != http.StatusOK {
				t.Errorf("GET /healthz = %d, want 200", h.Code)
			}
		})
	}
}

// startServer serves s on a loopback port and returns its URL and a client
// of its own. Serve's result arrives on the returned channel.
func startServer(t *testing.T, s *Server) (string, *http.Client, <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return "http://" + l.Addr().String(), &http.Client{Transport: tr}, served
}

type result struct {
	status int
	body   string
	err    error
}

// postAsync sends body to url/rpc in the background.
func postAsync(c *http.Client, url, body string) <-chan result {
	out := make(chan result, 1)
	go func() {
		resp, err := c.Post(url+"/rpc", "application/json", strings.NewReader(body))
		if err != nil {
			out <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	return out
}

// TestShutdownAnswersInFlight checks that Shutdown turns /readyz to 503 at
// once, then waits for a request in flight to be answered.
func TestShutdownAnswersInFlight(t *testing.T) {
	s, f := newServer(t)
	url, client, served := startServer(t, s)
	answered := postAsync(client, url, `{"jsonrpc":"2.0","method":"block","id":1}`)
	<-f.entered

	var released atomic.Bool
	shutdown := make(chan error, 1)
	releasedAtReturn := make(chan bool, 1)
	go func() {
		err := s.Shutdown(context.Background())
		releasedAtReturn <- released.Load()
		shutdown <- err
	}()

	// The call is still held by the dispatcher; readiness must already
	// have turned.
	testwait.Eventually(t, func() bool {
		return serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/readyz", nil)).Code == http.StatusServiceUnavailable
	}, "GET /readyz turns 503 during Shutdown")

	released.Store(true)
	close(f.release)
	if !<-releasedAtReturn {
		t.Error("Shutdown returned before the request in flight was answered")
	}
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown() error = %v, want nil", err)
	}
	r := <-answered
	if r.err != nil || r.status != http.StatusOK || r.body != `{"jsonrpc":"2.0","result":"released","id":1}` {
		t.Errorf("in-flight request = %d %s %v, want 200 with its result", r.status, r.body, r.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve() error = %v, want nil after Shutdown", err)
	}
}

// TestShutdownBoundedByContext checks that Shutdown gives up when its
// context ends, and that the calls still running are then canceled.
func TestShutdownBoundedByContext(t *testing.T) {
	s, f := newServer(t)
	url, client, served := startServer(t, s)
	answered := postAsync(client, url, `{"jsonrpc":"2.0","method":"block","id":1}`)
	<-f.entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown(canceled) error = %v, want %v", err, context.Canceled)
	}
	if err := <-f.ctxErrs; !errors.Is(err, context.Canceled) {
		t.Errorf("dispatcher context error = %v, want %v", err, context.Canceled)
	}
	if r := <-answered; r.err == nil {
		t.Errorf("in-flight request = %d %s, want a connection error", r.status, r.body)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve() error = %v, want nil after Shutdown", err)
	}
}

// TestA2APushNeedsAGuard: an A2A door given a push store without the
// guard of the URLs it sends to is refused when the option is applied.
func TestA2APushNeedsAGuard(t *testing.T) {
	var c config
	if err := WithA2A(A2AConfig{Push: &a2a.PushStore{}})(&c); err == nil {
		t.Error("WithA2A with a Push and no Guard = nil, want an error")
	}
	if err := WithA2A(A2AConfig{Name: "toolbus"})(&c); err != nil || !c.a2aOn {
		t.Errorf("WithA2A without push = %v (on %v), want nil and the door on", err, c.a2aOn)
	}
}
