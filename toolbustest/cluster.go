package toolbustest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	// URL is the JSON-RPC endpoint of the ingress, http://127.0.0.1:PORT/rpc.
	URL string
	// BaseURL is the ingress's root, for /healthz and /readyz.
	BaseURL string
	// NATS is the embedded server.
	NATS *bus.Embedded
	// Aggregator and Ingress are the running parts, for tests that look
	// inside.
	Aggregator *aggregator.Aggregator
	Ingress    *ingress.Server
	// Worker is the cluster's first worker (nil with [WithoutWorker]).
	Worker *Worker

	client  *http.Client
	logger  *slog.Logger
	workerO []worker.Option
}

// Worker is one worker runtime with its own NATS connection.
type Worker struct {
	Runtime *worker.Runtime
	Conn    *nats.Conn
}

// Kill closes the worker's NATS connection at once, without draining, as a
// crashed process would: calls it holds are never answered.
func (w *Worker) Kill() { w.Conn.Close() }

type options struct {
	register   []func(*worker.Runtime) error
	noWorker   bool
	aggOpts    []aggregator.Option
	ingOpts    []ingress.Option
	workerOpts []worker.Option
	logger     *slog.Logger
}

// Option configures [Start].
type Option func(*options)

// WithTools registers tools on the first worker in place of the demo
// toolset. It may be given more than once.
func WithTools(register func(rt *worker.Runtime) error) Option {
	return func(o *options) { o.register = append(o.register, register) }
}

// WithoutWorker starts no worker; add them with [Cluster.AddWorker].
func WithoutWorker() Option { return func(o *options) { o.noWorker = true } }

// WithAggregatorOptions passes options to [aggregator.New].
func WithAggregatorOptions(opts ...aggregator.Option) Option {
	return func(o *options) { o.aggOpts = append(o.aggOpts, opts...) }
}

// WithIngressOptions passes options to [ingress.New].
func WithIngressOptions(opts ...ingress.Option) Option {
	return func(o *options) { o.ingOpts = append(o.ingOpts, opts...) }
}

// WithWorkerOptions passes options to [worker.New] for every worker.
func WithWorkerOptions(opts ...worker.Option) Option {
	return func(o *options) { o.workerOpts = append(o.workerOpts, opts...) }
}

// WithLogger sets the logger of every part (default: one that discards).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Demo registers the demo toolset; it is what [Start] serves by default.
func Demo(rt *worker.Runtime) error { return demo.Register(rt) }

// Start starts a cluster and stops it when the test ends. It fails the test
// if any part does not start.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := options{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.register) == 0 {
		o.register = []func(*worker.Runtime) error{Demo}
	}
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(e.Shutdown)
	c := &Cluster{NATS: e, logger: o.logger, workerO: append([]worker.Option{worker.WithLogger(o.logger)}, o.workerOpts...)}
	if !o.noWorker {
		c.Worker = c.AddWorker(t, o.register...)
	}

	nc, err := e.Connect(bus.WithName("toolbustest-ingress"), bus.WithLogger(o.logger))
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(nc.Close)
	c.Aggregator, err = aggregator.New(nc, append([]aggregator.Option{aggregator.WithLogger(o.logger)}, o.aggOpts...)...)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	c.Ingress, err = ingress.New(c.Aggregator, append([]ingress.Option{
		ingress.WithLogger(o.logger),
		ingress.WithReadiness(func(context.Context) error {
			if s := nc.Status(); s != nats.CONNECTED {
				return fmt.Errorf("nats connection is %s", s)
			}
			return nil
		}),
	}, o.ingOpts...)...)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Ingress.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Ingress.Shutdown(ctx)
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("toolbustest: ingress: %v", err)
		}
	})
	c.BaseURL = "http://" + l.Addr().String()
	c.URL = c.BaseURL + "/rpc"
	transport := &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil}
	c.client = &http.Client{Transport: transport, Timeout: 5 * time.Minute}
	t.Cleanup(transport.CloseIdleConnections)
	return c
}

// AddWorker starts another worker on a connection of its own, serving what
// register adds (the demo toolset when none is given). It is drained when
// the test ends, unless the test killed it.
func (c *Cluster) AddWorker(t testing.TB, register ...func(rt *worker.Runtime) error) *Worker {
	t.Helper()
	if len(register) == 0 {
		register = []func(*worker.Runtime) error{Demo}
	}
	nc, err := c.NATS.Connect(bus.WithName("toolbustest-worker"), bus.WithLogger(c.logger))
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	rt, err := worker.New(nc, c.workerO...)
	if err != nil {
		nc.Close()
		t.Fatalf("toolbustest: %v", err)
	}
	for _, r := range register {
		if err := r(rt); err != nil {
			nc.Close()
			t.Fatalf("toolbustest: register tools: %v", err)
		}
	}
	if err := rt.Start(); err != nil {
		nc.Close()
		t.Fatalf("toolbustest: start worker: %v", err)
	}
	// Make sure the subscriptions reached the server before calls are sent.
	if err := nc.Flush(); err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
		nc.Close()
	})
	return &Worker{Runtime: rt, Conn: nc}
}

// Post sends body to the JSON-RPC endpoint with the given header pairs
// (name, value, name, value...) and returns the status and body. Content-Type
// is application/json unless a pair sets it.
func (c *Cluster) Post(t testing.TB, body string, header ...string) (int, []byte) {
	t.Helper()
	if len(header)%2 != 0 {
		t.Fatalf("toolbustest: Post header pairs are odd: %q", header)
	}
	req, err := http.NewRequest(http.MethodPost, c.URL, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("toolbustest: POST %s: %v", c.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("toolbustest: read answer: %v", err)
	}
	return resp.StatusCode, data
}

// Call sends one call with id 1 and returns its response, failing the test
// on anything but a 200 with a single response.
func (c *Cluster) Call(t testing.TB, method, params string, header ...string) schema.Response {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q`, method)
	if params != "" {
		body += `,"params":` + params
	}
	status, data := c.Post(t, body+"}", header...)
	if status != http.StatusOK {
		t.Fatalf("toolbustest: %s answered HTTP %d: %s", method, status, data)
	}
	var r schema.Response
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("toolbustest: %s answer %s: %v", method, data, err)
	}
	return r
}

// Batch sends a batch and returns its responses, failing the test on
// anything but a 200 with an array.
func (c *Cluster) Batch(t testing.TB, body string, header ...string) []schema.Response {
	t.Helper()
	status, data := c.Post(t, body, header...)
	if status != http.StatusOK {
		t.Fatalf("toolbustest: batch answered HTTP %d: %s", status, data)
	}
	var rs []schema.Response
	if err := json.Unmarshal(data, &rs); err != nil {
		t.Fatalf("toolbustest: batch answer %s: %v", data, err)
	}
	return rs
}
