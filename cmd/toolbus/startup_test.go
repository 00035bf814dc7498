package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
)

// gate is a TCP port that stands for a NATS server not started yet: it
// closes every connection until open is called, and from then on passes
// them to the server at target. Its port stays the same throughout, so a
// client can be pointed at it before the server exists.
type gate struct {
	l      net.Listener
	mu     sync.Mutex
	target string
	wg     sync.WaitGroup
}

func newGate(t *testing.T) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{l: l}
	g.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			target := g.target
			g.mu.Unlock()
			if target == "" {
				c.Close()
				continue
			}
			g.wg.Go(func() { pipe(c, target) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		g.wg.Wait()
	})
	return g
}

// url is the NATS URL of the gate.
func (g *gate) url() string { return "nats://" + g.l.Addr().String() }

// open passes connections to the NATS server at hostport from now on.
func (g *gate) open(hostport string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.target = hostport
}

// pipe copies between c and a new connection to target until either side
// closes.
func pipe(c net.Conn, target string) {
	defer c.Close()
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(s, c); done <- struct{}{} }()
	go func() { io.Copy(c, s); done <- struct{}{} }()
	<-done
	// Closing both ends ends the other copy too.
	c.Close()
	s.Close()
	<-done
}

// startServer starts a NATS server on a free loopback port; jetStream
// turns JetStream on.
func startServer(t *testing.T, jetStream bool) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, JetStream: jetStream}
	if jetStream {
		opts.StoreDir = t.TempDir()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready after 10s")
	}
	return srv
}

// readiness reads a readiness endpoint: its status code and reason.
func readiness(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body struct{ Reason string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body.Reason
}

// call posts one JSON-RPC request to url and returns its response.
func call(t *testing.T, url, request string) schema.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(request))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var r schema.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("POST %s %s: %v", url, request, err)
	}
	return r
}

// reason returns the data.reason of e, or "".
func reason(e *schema.Error) string {
	if e == nil {
		return ""
	}
	var data struct{ Reason string }
	_ = json.Unmarshal(e.Data, &data)
	return data.Reason
}

// TestIngressStartsBeforeNATS starts an ingress and a worker while no NATS
// server answers: both keep trying, the ingress says on /readyz what it
// waits for and refuses calls as unavailable (retryable), and both become
// ready by themselves once the server is there.
func TestIngressStartsBeforeNATS(t *testing.T) {
	g := newGate(t)
	dc := node.DefaultDevConfig()
	dc.Gateway.Listen = "127.0.0.1:0"
	ic, wc := dc.Gateway, dc.Worker
	var (
		addr    ingressAddr
		ingSt   *bus.Startup
		wrkSt   *bus.Startup
		started = time.Now()
	)
	ingress := newApp(fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
		remoteModule(g.url()), ingressModule(ic), fx.Populate(&addr, &ingSt))
	worker := newApp(fx.Decorate(func(*slog.Logger) *slog.Logger { return discard }),
		remoteModule(g.url()), workerModule(wc, nil), fx.Populate(&wrkSt))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, app := range []*fx.App{ingress, worker} {
		if err := app.Start(ctx); err != nil {
			t.Fatalf("start before NATS: %v", err)
		}
		if app == ingress {
			ingSt.Begin()
		} else {
			wrkSt.Begin()
		}
		t.Cleanup(func() { app.Stop(context.Background()) })
	}
	base := "http://" + addr.String()

	// Not ready, and says why in one line.
	for {
		code, why := readiness(t, base+"/readyz")
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz before NATS = %d, want 503", code)
		}
		if strings.Contains(why, "not connected to NATS at "+g.url()) {
			if strings.Contains(why, "\n") {
				t.Errorf("/readyz reason %q is more than one line", why)
			}
			break
		}
		if time.Since(started) > 30*time.Second {
			t.Fatalf("/readyz reason %q, want it to say that NATS is not connected", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := call(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}`); r.Error == nil ||
		r.Error.Code != schema.CodeUnavailable || reason(r.Error) != "bus_disconnected" {
		t.Errorf("echo before NATS = %+v, want -32003 bus_disconnected", r.Error)
	}
	if r := call(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.list","params":{}}`); r.Error == nil ||
		r.Error.Code != schema.CodeUnavailable || reason(r.Error) != "jobs_not_ready" {
		t.Errorf("rpc.jobs.list before NATS = %+v, want -32003 jobs_not_ready", r.Error)
	}
	select {
	case err := <-ingSt.Fatal():
		t.Fatalf("ingress gave up: %v", err)
	case err := <-wrkSt.Fatal():
		t.Fatalf("worker gave up: %v", err)
	default:
	}

	// NATS comes up: both become ready without being told.
	srv := startServer(t, true)
	g.open(srv.Addr().String())
	for name, st := range map[string]*bus.Startup{"ingress": ingSt, "worker": wrkSt} {
		select {
		case <-st.Ready():
		case err := <-st.Fatal():
			t.Fatalf("%s gave up: %v", name, err)
		case <-ctx.Done():
			t.Fatalf("%s not ready a minute after NATS came up: %v", name, st.Err())
		}
	}
	if code, why := readiness(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once NATS is up = %d %q, want 200", code, why)
	}
	for {
		r := call(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"up":true}}`)
		if r.Error == nil {
			if string(r.Result) != `{"up":true}` {
				t.Errorf("echo once NATS is up = %s, want {\"up\":true}", r.Result)
			}
			break
		}
		// The worker's subscription may reach the server a moment after
		// the ingress is ready: the call then finds no worker yet.
		if r.Error.Code != schema.CodeMethodNotFound && r.Error.Code != schema.CodeUnavailable || ctx.Err() != nil {
			t.Fatalf("echo once NATS is up = %+v, want a result", r.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := call(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.list","params":{}}`); r.Error != nil {
		t.Errorf("rpc.jobs.list once NATS is up = %+v, want a result", r.Error)
	}
}

// TestStartupFailures checks that a condition that will not pass stops a
// part with one line that names the cause and what fixes it, and nothing
// of how the program is put together.
func TestStartupFailures(t *testing.T) {
	noJetStream := startServer(t, false).ClientURL()
	single := startServer(t, true).ClientURL()
	users := startUserNATS(t, "right")
	tests := []struct {
		name string
		args []string
		is   error    // nil: no sentinel to check
		says []string // parts of the message
	}{
		{"ingress without JetStream", []string{"ingress", "--auth=off", "--listen", "127.0.0.1:0", "--nats", noJetStream},
			bus.ErrNoJetStream, []string{"JetStream", "--jobs=false", "--idempotency=false"}},
		{"replicas above the servers", []string{"ingress", "--auth=off", "--listen", "127.0.0.1:0", "--nats", single, "--job-replicas", "3"},
			bus.ErrReplicas, []string{"3 replicas", "--job-replicas"}},
		{"wrong password", []string{"worker", "--metrics-listen", "", "--nats", users, "--nats-user", "worker", "--nats-password", "wrong"},
			bus.ErrCredentials, []string{"authorization violation", "--nats-password"}},
		{"authentication not configured", []string{"ingress", "--listen", "127.0.0.1:0", "--nats", single},
			nil, []string{"--auth-file", "--auth=off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := execute(t, ctx, tt.args...)
			if err == nil {
				t.Fatalf("toolbus %s = nil, want an error", strings.Join(tt.args, " "))
			}
			msg := err.Error()
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q, want it to wrap %v", msg, tt.is)
			}
			for _, part := range tt.says {
				if !strings.Contains(strings.ToLower(msg), strings.ToLower(part)) {
					t.Errorf("error %q does not say %q", msg, part)
				}
			}
			for _, leak := range []string{"\n", "could not build", "missing dependencies", ".go:", "func", "fx."} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q holds %q", msg, leak)
				}
			}
		})
	}
}
