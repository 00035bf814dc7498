package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.DiscardHandler)

// connect opens a connection to e, closed when the test ends.
func connect(t *testing.T, e *bus.Embedded) *nats.Conn {
	t.Helper()
	nc, err := e.Connect(bus.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ready begins st and waits until it is ready, failing on a condition
// that will not pass.
func ready(t *testing.T, st *bus.Startup) {
	t.Helper()
	st.Begin()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case <-st.Ready():
	case err := <-st.Fatal():
		t.Fatalf("startup failed: %v", err)
	case <-timer.C:
		t.Fatalf("not ready after a minute: %v", st.Err())
	}
}

// post sends one JSON-RPC request to url and returns its response.
func post(t *testing.T, url, request string) schema.Response {
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

// startGateway starts g on a free loopback port and returns its base URL;
// g is shut down when the test ends.
func startGateway(t *testing.T, g *node.Gateway) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(l); err != nil {
		l.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// TestGatewayAndWorker builds a cluster of one gateway and one worker,
// each on its own connection and startup, and checks that a call and the
// jobs methods reach them, and that both serve their status.
func TestGatewayAndWorker(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)

	wnc := connect(t, e)
	rt, err := worker.New(wnc, worker.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil }); err != nil {
		t.Fatal(err)
	}
	wst := bus.NewStartup(discard)
	t.Cleanup(wst.Stop)
	w, err := node.NewWorker(wnc, rt, wst, node.WithLogger(discard))
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatalf("worker Start: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Shutdown(context.Background()); err != nil {
			t.Errorf("worker Shutdown: %v", err)
		}
	})
	ready(t, wst)
	if err := w.Ready(); err != nil {
		t.Errorf("worker Ready() = %v once started", err)
	}

	gnc := connect(t, e)
	gst := bus.NewStartup(discard)
	t.Cleanup(gst.Stop)
	g, err := node.NewGateway(gnc, gst, node.WithLogger(discard), node.WithJobs(node.DefaultGatewayConfig().Jobs), node.WithRegistry(), node.WithIdempotency(0, 0))
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	if g.Jobs() != nil {
		t.Error("Jobs() before Start, want nil")
	}
	base := startGateway(t, g)
	ready(t, gst)
	if g.Jobs() == nil {
		t.Error("Jobs() once ready = nil")
	}
	if err := g.Ready(); err != nil {
		t.Errorf("gateway Ready() = %v once started", err)
	}

	if r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`); r.Error != nil || string(r.Result) != `{"a":1}` {
		t.Errorf("echo = %s %+v, want {\"a\":1}", r.Result, r.Error)
	}
	if r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.list","params":{}}`); r.Error != nil {
		t.Errorf("rpc.jobs.list = %+v, want a result", r.Error)
	}
	// The gateway's runner sends the job to the worker as a call.
	r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"echo","params":{"b":2}}}`)
	var sub schema.JobSubmitResult
	if r.Error != nil || json.Unmarshal(r.Result, &sub) != nil {
		t.Fatalf("rpc.jobs.submit = %s %+v, want a job", r.Result, r.Error)
	}
	var job schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.get","params":{"id":"`+sub.ID+`"}}`)
		return r.Error == nil && json.Unmarshal(r.Result, &job) == nil && job.State.Final()
	}, "the echo job ends")
	if job.State != schema.JobSucceeded || string(job.Result) != `{"b":2}` {
		t.Errorf("echo job = %s %s %+v, want succeeded with {\"b\":2}", job.State, job.Result, job.Error)
	}

	// Each answers as the micro service that `toolbus status` finds.
	caller := connect(t, e)
	for _, kind := range []string{bus.KindIngress, bus.KindWorker} {
		subject, err := micro.ControlSubject(micro.InfoVerb, "toolbus-"+kind, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := caller.Request(subject, nil, 10*time.Second); err != nil {
			t.Errorf("%s status service: %v", kind, err)
		}
	}
}

// TestGatewayJobsNotReady starts a gateway against a server without
// JetStream: the jobs methods are refused -32003 jobs_not_ready, the
// other calls are served, and the startup reports the condition.
func TestGatewayJobsNotReady(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
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
	nc, err := bus.Connect(srv.ClientURL(), bus.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := bus.NewStartup(discard)
	t.Cleanup(st.Stop)
	g, err := node.NewGateway(nc, st, node.WithLogger(discard), node.WithJobs(node.DefaultGatewayConfig().Jobs))
	if err != nil {
		t.Fatalf("NewGateway: %v", err)
	}
	base := startGateway(t, g)
	st.Begin()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case err := <-st.Fatal():
		if !errors.Is(err, bus.ErrNoJetStream) {
			t.Errorf("startup failed with %v, want %v", err, bus.ErrNoJetStream)
		}
	case <-st.Ready():
		t.Fatal("ready without JetStream")
	case <-timer.C:
		t.Fatalf("no failure after a minute: %v", st.Err())
	}
	if g.Ready() == nil {
		t.Error("Ready() = nil while jobs wait for JetStream")
	}
	r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.list","params":{}}`)
	if r.Error == nil || r.Error.Code != schema.CodeUnavailable {
		t.Fatalf("rpc.jobs.list without JetStream = %s %+v, want -32003", r.Result, r.Error)
	}
	var data struct {
		Reason    string `json:"reason"`
		Retryable bool   `json:"retryable"`
	}
	if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.Reason != "jobs_not_ready" || !data.Retryable {
		t.Errorf("rpc.jobs.list error data = %s, want reason jobs_not_ready, retryable", r.Error.Data)
	}
}

// TestGatewayStartOnce checks that a second Start is refused, and that
// Shutdown without Start returns and refuses a later Start.
func TestGatewayStartOnce(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	st := bus.NewStartup(discard)
	t.Cleanup(st.Stop)
	idle, err := node.NewGateway(connect(t, e), st, node.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown without Start = %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := idle.Start(l); err == nil {
		t.Error("Start after Shutdown = nil, want an error")
	}
	g, err := node.NewGateway(connect(t, e), st, node.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	startGateway(t, g)
	if err := g.Start(l); err == nil {
		t.Error("second Start = nil, want an error")
	}
}

func TestNewGatewayRefusesBadOptions(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc := connect(t, e)
	st := bus.NewStartup(discard)
	t.Cleanup(st.Stop)
	tests := []struct {
		name string
		opt  node.GatewayOption
	}{
		{"prefix", node.WithPrefix("a b")},
		{"subjects", node.WithSubjects(bus.Subjects{})},
		{"logger", node.WithLogger(nil)},
		{"version", node.WithVersion("")},
		{"replicas", node.WithReplicas(0)},
		{"metrics", node.WithMetrics(nil)},
		{"idempotency", node.WithIdempotency(-time.Second, 0)},
		{"jobs of a zero config", node.WithJobs(node.JobsConfig{On: true})},
		{"callback allowlist", node.WithJobs(node.JobsConfig{CallbackAllow: []string{"10.0.0.0/33"}})},
		{"job counters", node.WithJobCounters(nil)},
		{"A2A without jobs", node.WithA2A(node.A2AConfig{On: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := node.NewGateway(nc, st, tt.opt); err == nil {
				t.Errorf("NewGateway(%s) = nil error, want one", tt.name)
			}
		})
	}
	if _, err := node.NewGateway(nil, st); err == nil {
		t.Error("NewGateway(nil conn) = nil error, want one")
	}
}

// TestGatewaySamplesTheJobsQueue: the gateway records the depth of the
// jobs queue in its trends by itself, so the dashboard's chart of it has a
// history though nobody watched.
func TestGatewaySamplesTheJobsQueue(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	gst := bus.NewStartup(discard)
	t.Cleanup(gst.Stop)
	g, err := node.NewGateway(connect(t, e), gst, node.WithLogger(discard), node.WithJobs(node.DefaultGatewayConfig().Jobs))
	if err != nil {
		t.Fatal(err)
	}
	base := startGateway(t, g)
	ready(t, gst)
	// No worker serves it: the job stays queued.
	if r := post(t, base+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"nobody.serves"}}`); r.Error != nil {
		t.Fatalf("rpc.jobs.submit = %+v", r.Error)
	}
	stop := g.SampleJobsQueued(10 * time.Millisecond)
	defer stop()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	caller := connect(t, e)
	toolbustest.Eventually(t, func() bool {
		sts, err := bus.GatherStatus(context.Background(), caller, subjects, 200*time.Millisecond)
		if err != nil {
			return false
		}
		for _, st := range sts {
			if st.Kind == bus.KindIngress && st.Trends != nil && len(st.Trends.JobsQueued) > 0 && st.Trends.JobsQueued[len(st.Trends.JobsQueued)-1] == 1 {
				return true
			}
		}
		return false
	}, "the ingress's trends show the queued job")
}

// TestGatewayCountsStrayReplies: the replies that reach no waiting call
// are exported for the gateway's aggregator and for its job runner's, one
// series each, so a flood of guessed answers shows on /metrics.
func TestGatewayCountsStrayReplies(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	gst := bus.NewStartup(discard)
	t.Cleanup(gst.Stop)
	reg := prometheus.NewRegistry()
	g, err := node.NewGateway(connect(t, e), gst, node.WithLogger(discard), node.WithJobs(node.DefaultGatewayConfig().Jobs), node.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	startGateway(t, g)
	ready(t, gst)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "toolbus_aggregator_stray_replies_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reply_prefix" {
					prefixes[l.GetValue()] = true
				}
			}
		}
	}
	for _, want := range []string{"toolbus.reply", "toolbus.jobs.reply"} {
		if !prefixes[want] {
			t.Errorf("toolbus_aggregator_stray_replies_total has reply prefixes %v, want %q among them", prefixes, want)
		}
	}
}
