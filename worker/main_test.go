package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is an embedded NATS server with a runtime on one connection and a
// caller on another.
type cluster struct {
	rt     *worker.Runtime
	caller *nats.Conn
	logs   *syncBuffer
	nats   *bus.Embedded
}

// newCluster starts a server and a runtime; the test registers handlers and
// calls rt.Start. Everything is stopped when the test ends.
func newCluster(t *testing.T, cfg bus.EmbeddedConfig, opts ...worker.Option) *cluster {
	t.Helper()
	e, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	wnc, err := e.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(wnc.Close)
	cnc, err := e.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(cnc.Close)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := worker.New(wnc, append([]worker.Option{worker.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &cluster{rt: rt, caller: cnc, logs: logs, nats: e}
}

// connect opens another connection to the cluster's server, closed when
// the test ends if the test did not close it.
func (c *cluster) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := c.nats.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *cluster) start(t *testing.T) {
	t.Helper()
	if err := c.rt.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// callMsg builds the message of a call of method with id 1 and the given raw
// params (none when empty).
func callMsg(t *testing.T, method, params string, deadline time.Time) *nats.Msg {
	t.Helper()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call(method)
	if err != nil {
		t.Fatalf("Call(%q): %v", method, err)
	}
	env := &schema.CallEnvelope{ID: []byte("1"), Method: method}
	if params != "" {
		env.Params = []byte(params)
	}
	msg, err := bus.CallMsg(subject, env, deadline, "")
	if err != nil {
		t.Fatalf("CallMsg: %v", err)
	}
	return msg
}

// call sends one call and returns the decoded reply.
func (c *cluster) call(t *testing.T, method, params string, deadline time.Time) (*schema.ReplyEnvelope, error) {
	t.Helper()
	return c.send(callMsg(t, method, params, deadline))
}

func (c *cluster) send(msg *nats.Msg) (*schema.ReplyEnvelope, error) {
	resp, err := c.caller.RequestMsg(msg, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return bus.ReadReply(resp)
}

// result calls method and fails the test unless it answers a result.
func (c *cluster) result(t *testing.T, method, params string) string {
	t.Helper()
	r, err := c.call(t, method, params, time.Time{})
	if err != nil {
		t.Fatalf("call %s: %v", method, err)
	}
	if e := r.Err(); e != nil {
		t.Fatalf("call %s = error %d %q %s, want a result", method, e.Code, e.Message, e.Data)
	}
	return string(r.Result)
}

// rpcError calls method and fails the test unless it answers an error.
func (c *cluster) rpcError(t *testing.T, method, params string, deadline time.Time) *schema.Error {
	t.Helper()
	r, err := c.call(t, method, params, deadline)
	if err != nil {
		t.Fatalf("call %s: %v", method, err)
	}
	e := r.Err()
	if e == nil {
		t.Fatalf("call %s = result %s, want an error", method, r.Result)
	}
	return e
}

// dataMember returns one member of an error's data object.
func dataMember(t *testing.T, e *schema.Error, name string) any {
	t.Helper()
	var data map[string]any
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatalf("error data %s is not an object: %v", e.Data, err)
	}
	return data[name]
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

var _ io.Writer = (*syncBuffer)(nil)

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
