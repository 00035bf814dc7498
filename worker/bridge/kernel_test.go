package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/bridge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// runtime is a [bridge.Runtime] that keeps its handlers in a map, and
// calls them directly.
type runtime struct {
	mu       sync.Mutex
	handlers map[string]worker.Handler
}

func newRuntime() *runtime {
	return &runtime{handlers: map[string]worker.Handler{}}
}

func (r *runtime) Handle(method string, h worker.Handler, opts ...worker.HandleOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.handlers[method]; ok {
		return errors.New("registered twice: " + method)
	}
	r.handlers[method] = h
	return nil
}

// call calls method and returns its result as a string, or its error as
// a *schema.Error.
func (r *runtime) call(t *testing.T, method string) (string, *schema.Error) {
	t.Helper()
	r.mu.Lock()
	h := r.handlers[method]
	r.mu.Unlock()
	if h == nil {
		t.Fatalf("%s is not registered", method)
	}
	res, err := h.ServeCall(t.Context(), &worker.Request{ID: json.RawMessage("1"), Method: method})
	if err != nil {
		var se *schema.Error
		if !errors.As(err, &se) {
			t.Fatalf("%s = %v, want a *schema.Error", method, err)
		}
		return "", se
	}
	s, _ := res.(string)
	return s, nil
}

// server is a fake remote server, and the adapter to it. Its tools answer
// their name and the number of the connection they were called over.
type server struct {
	start time.Time

	mu       sync.Mutex
	tools    []string
	refuse   int             // connections to refuse before the next one is accepted
	attempts []time.Duration // when each connection was attempted, since start
	conns    []*conn
	listErr  error // the error of the next listings, if any
	lostCall bool  // calls say the server is gone
	calls    int   // calls that reached the server
}

func newServer(tools ...string) *server { return &server{start: time.Now(), tools: tools} }

var errRefused = errors.New("connection refused")

func (s *server) Connect(ctx context.Context) (bridge.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, time.Since(s.start))
	if s.refuse > 0 {
		s.refuse--
		return nil, errRefused
	}
	c := &conn{s: s, n: len(s.conns) + 1, ended: make(chan struct{})}
	s.conns = append(s.conns, c)
	return c, nil
}

func (s *server) set(f func(s *server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// drop ends the latest connection, as a server going away would.
func (s *server) drop() {
	s.mu.Lock()
	c := s.conns[len(s.conns)-1]
	s.mu.Unlock()
	c.end()
}

type conn struct {
	s      *server
	n      int
	ended  chan struct{}
	once   sync.Once
	closed int
}

func (c *conn) end() { c.once.Do(func() { close(c.ended) }) }

func (c *conn) List(context.Context) ([]bridge.Tool, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.listErr != nil {
		return nil, c.s.listErr
	}
	var tools []bridge.Tool
	for _, name := range c.s.tools {
		tools = append(tools, bridge.Tool{Name: name, Descriptor: schema.Descriptor{Description: "the tool " + name},
			Call: worker.HandlerFunc(func(context.Context, *worker.Request) (any, error) {
				c.s.mu.Lock()
				defer c.s.mu.Unlock()
				c.s.calls++
				if c.s.lostCall {
					return nil, bridge.Lost(schema.NewError(schema.CodeUnavailable, "unavailable: the server went away", nil))
				}
				return name + "@" + string(rune('0'+c.n)), nil
			})})
	}
	return tools, nil
}

func (c *conn) Wait() { <-c.ended }

func (c *conn) Close() error {
	c.s.mu.Lock()
	c.closed++
	c.s.mu.Unlock()
	c.end()
	return nil
}

func start(t *testing.T, rt bridge.Runtime, s *server, cfg bridge.Config) *bridge.Kernel {
	t.Helper()
	if cfg.Remote == "" {
		cfg.Remote = "test server"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	k, err := bridge.New(rt, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return k
}

func wantResult(t *testing.T, rt *runtime, method, want string) {
	t.Helper()
	if got, err := rt.call(t, method); err != nil || got != want {
		t.Fatalf("%s = %q, %v; want %q", method, got, err, want)
	}
}

func wantError(t *testing.T, rt *runtime, method string, want *schema.Error) *schema.Error {
	t.Helper()
	got, err := rt.call(t, method)
	if !errors.Is(err, want) {
		t.Fatalf("%s = %q, %v; want code %d", method, got, err, want.Code)
	}
	return err
}

func TestKernelRegistersNewToolsAndWithdrawsGoneOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a", "b", "bad name!")
		rt := newRuntime()
		k := start(t, rt, s, bridge.Config{Prefix: "ext"})
		defer k.Close()
		if got, want := k.Methods(), []string{"ext.a", "ext.b", "ext.bad_name_"}; !slices.Equal(got, want) {
			t.Fatalf("Methods() = %v, want %v", got, want)
		}
		wantResult(t, rt, "ext.a", "a@1")
		wantResult(t, rt, "ext.bad_name_", "bad name!@1")

		s.set(func(s *server) { s.tools = []string{"b", "c"} })
		k.Relist()
		synctest.Wait()
		if got, want := k.Methods(), []string{"ext.a", "ext.b", "ext.bad_name_", "ext.c"}; !slices.Equal(got, want) {
			t.Fatalf("Methods() after the list changed = %v, want %v", got, want)
		}
		wantResult(t, rt, "ext.c", "c@1")
		err := wantError(t, rt, "ext.a", schema.ErrMethodNotFound)
		var data map[string]any
		if json.Unmarshal(err.Data, &data) != nil || data["reason"] != schema.ReasonToolWithdrawn {
			t.Errorf("ext.a withdrawn: data = %s, want reason %s", err.Data, schema.ReasonToolWithdrawn)
		}

		s.set(func(s *server) { s.tools = []string{"a", "b", "c"} })
		k.Relist()
		synctest.Wait()
		wantResult(t, rt, "ext.a", "a@1")
		if got := len(s.conns); got != 1 {
			t.Errorf("connections = %d, want 1: listing again needs no new one", got)
		}
	})
}

func TestKernelListsAgainEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a")
		rt := newRuntime()
		k := start(t, rt, s, bridge.Config{Relist: time.Minute})
		defer k.Close()
		s.set(func(s *server) { s.tools = []string{"b"} })
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		wantResult(t, rt, "a", "a@1")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantError(t, rt, "a", schema.ErrMethodNotFound)
		wantResult(t, rt, "b", "b@1")
	})
}

func TestKernelReconnectsWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a")
		rt := newRuntime()
		k := start(t, rt, s, bridge.Config{MinBackoff: 10 * time.Millisecond, MaxBackoff: 30 * time.Millisecond})
		defer k.Close()

		s.set(func(s *server) { s.refuse = 3 })
		dropped := time.Since(s.start)
		s.drop()
		synctest.Wait()
		err := wantError(t, rt, "a", schema.ErrUnavailable)
		var data map[string]any
		if json.Unmarshal(err.Data, &data) != nil || data["retryable"] != true {
			t.Errorf("a while reconnecting: data = %s, want retryable", err.Data)
		}

		time.Sleep(time.Second)
		synctest.Wait()
		wantResult(t, rt, "a", "a@2")
		var waits []time.Duration
		for _, at := range s.attempts[1:] {
			waits = append(waits, at-dropped)
			dropped = at
		}
		// Three refused, then one accepted: 10ms, doubled, up to 30ms.
		if want := []time.Duration{10, 20, 30, 30}; !slices.Equal(waits, scale(want, time.Millisecond)) {
			t.Errorf("waits before each attempt = %v, want %v", waits, scale(want, time.Millisecond))
		}
		if s.conns[0].closed != 1 {
			t.Errorf("the ended connection was closed %d times, want once", s.conns[0].closed)
		}
	})
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d * unit
	}
	return out
}

func TestKernelReconnectsWhenACallFindsTheServerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a")
		rt := newRuntime()
		k := start(t, rt, s, bridge.Config{MinBackoff: time.Second})
		defer k.Close()

		s.set(func(s *server) { s.lostCall = true })
		err := wantError(t, rt, "a", schema.ErrUnavailable)
		if err.Message != "unavailable: the server went away" {
			t.Errorf("a = %q, want the tool's own error", err.Message)
		}
		// Until it is back, calls are answered at once, without reaching it.
		wantError(t, rt, "a", schema.ErrUnavailable)
		if s.calls != 1 {
			t.Errorf("calls that reached the server = %d, want 1", s.calls)
		}

		s.set(func(s *server) { s.lostCall = false })
		time.Sleep(time.Second)
		synctest.Wait()
		wantResult(t, rt, "a", "a@2")
		if s.conns[0].closed != 1 {
			t.Errorf("the lost connection was closed %d times, want once", s.conns[0].closed)
		}
	})
}

func TestKernelListingFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a")
		rt := newRuntime()
		k := start(t, rt, s, bridge.Config{MinBackoff: time.Second})
		defer k.Close()

		// An error that is not Lost leaves the connection and its tools.
		s.set(func(s *server) { s.listErr = errors.New("try later") })
		k.Relist()
		synctest.Wait()
		wantResult(t, rt, "a", "a@1")

		// Lost takes the connection out of service, and connects again.
		s.set(func(s *server) { s.listErr = bridge.Lost(errors.New("gone")) })
		k.Relist()
		synctest.Wait()
		wantError(t, rt, "a", schema.ErrUnavailable)
		s.set(func(s *server) { s.listErr = nil })
		time.Sleep(time.Second)
		synctest.Wait()
		wantResult(t, rt, "a", "a@2")
	})
}

func TestKernelCloseEndsEveryGoroutine(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(s *server)
	}{
		{"connected", func(*server) {}},
		{"waiting to reconnect", func(s *server) { s.refuse = 1 << 20; s.drop() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer("a")
				rt := newRuntime()
				k := start(t, rt, s, bridge.Config{Relist: time.Hour})
				tt.setup(s)
				synctest.Wait()
				if err := k.Close(); err != nil {
					t.Errorf("Close = %v", err)
				}
				// synctest.Test fails if any goroutine the kernel started
				// is left.
				wantError(t, rt, "a", schema.ErrUnavailable)
				for i, c := range s.conns {
					if c.closed != 1 {
						t.Errorf("connection %d was closed %d times, want once", i+1, c.closed)
					}
				}
			})
		})
	}
}

func TestKernelStartFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer("a")
		s.refuse = 1
		k, err := bridge.New(newRuntime(), s, bridge.Config{Remote: "test server", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Start(t.Context()); !errors.Is(err, errRefused) {
			t.Fatalf("Start = %v, want %v", err, errRefused)
		}
		if err := k.Close(); err != nil {
			t.Errorf("Close after a failed Start = %v", err)
		}
		if err := k.Start(t.Context()); err == nil {
			t.Error("Start after Close = nil, want an error")
		}
		if len(s.attempts) != 1 {
			t.Errorf("connection attempts = %d, want 1", len(s.attempts))
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  bridge.Config
		ok   bool
	}{
		{"defaults", bridge.Config{Remote: "x"}, true},
		{"everything", bridge.Config{Remote: "x", Prefix: "fs", MinBackoff: time.Second, MaxBackoff: time.Minute, Relist: time.Hour}, true},
		{"no remote", bridge.Config{}, false},
		{"prefix outside the grammar", bridge.Config{Remote: "x", Prefix: "a b"}, false},
		{"reserved prefix", bridge.Config{Remote: "x", Prefix: "rpc"}, false},
		{"backoff out of order", bridge.Config{Remote: "x", MinBackoff: time.Second, MaxBackoff: time.Millisecond}, false},
		{"negative backoff", bridge.Config{Remote: "x", MinBackoff: -time.Second}, false},
		{"negative relist", bridge.Config{Remote: "x", Relist: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate(%+v) = %v, want ok %v", tt.cfg, err, tt.ok)
			}
		})
	}
}
