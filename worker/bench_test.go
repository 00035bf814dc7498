package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// benchRuntime starts an embedded NATS server and a started runtime that
// serves echo (its params back, as a json.RawMessage) and fail (an error
// with data, made by schema.NewError), logging at Info as a deployment
// does. It returns the runtime and a second connection to call it from.
func benchRuntime(b *testing.B) (*worker.Runtime, *nats.Conn) {
	b.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		b.Fatalf("StartEmbedded: %v", err)
	}
	b.Cleanup(e.Shutdown)
	wnc, err := e.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(wnc.Close)
	cnc, err := e.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cnc.Close)
	rt, err := worker.New(wnc, worker.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			b.Errorf("Shutdown: %v", err)
		}
	})
	if err := rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) {
		return req.Params, nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := rt.HandleFunc("fail", func(context.Context, *worker.Request) (any, error) {
		return nil, schema.NewError(2001, "insufficient funds", map[string]any{"balance": 3, "currency": "EUR"})
	}); err != nil {
		b.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		b.Fatal(err)
	}
	return rt, cnc
}

// benchParams returns a JSON object of about n bytes: a list of small
// records, as a tool's params or result often is.
func benchParams(n int) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteString(`{"items":[`)
	for i := 0; buf.Len() < n; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"id":`)
		buf.WriteString(strconv.Itoa(i))
		buf.WriteString(`,"name":"item \u00e9 `)
		buf.WriteString(strconv.Itoa(i))
		buf.WriteString(`","price":12.5,"tags":["a","b"]}`)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

var benchSizes = []struct {
	name   string
	params json.RawMessage
}{
	{"small", json.RawMessage(`{"n":1}`)},
	{"64KiB", benchParams(64 << 10)},
}

// BenchmarkTryInvoke is a call that the process's own runtime runs without
// the bus, as toolbus dev runs a call of its demo tools.
func BenchmarkTryInvoke(b *testing.B) {
	rt, _ := benchRuntime(b)
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			call := &schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: "echo", Params: size.params}}
			b.ReportAllocs()
			b.SetBytes(int64(len(size.params)))
			for b.Loop() {
				result, e, ok := rt.TryInvoke(context.Background(), call)
				if !ok || e != nil || len(result) != len(size.params) {
					b.Fatalf("TryInvoke = %d bytes, %v, %v", len(result), e, ok)
				}
			}
		})
	}
}

// BenchmarkServe is a call over the bus: the message as an aggregator
// publishes it, the runtime's decoding, handling and reply, and the reply
// read as the aggregator reads it.
func BenchmarkServe(b *testing.B) {
	_, nc := benchRuntime(b)
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, method string, params json.RawMessage, check func(*schema.ReplyEnvelope) bool) {
		subject, err := subjects.Call(method)
		if err != nil {
			b.Fatal(err)
		}
		msg, err := bus.CallMsg(subject, &schema.CallEnvelope{ID: []byte(`1`), Method: method, Params: params}, time.Time{}, "")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(params)))
		for b.Loop() {
			m, err := nc.RequestMsg(msg, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			r, err := bus.ReadReply(m)
			if err != nil || !check(r) {
				b.Fatalf("reply = %+v, %v", r, err)
			}
		}
	}
	for _, size := range benchSizes {
		b.Run(size.name, func(b *testing.B) {
			run(b, "echo", size.params, func(r *schema.ReplyEnvelope) bool { return len(r.Result) == len(size.params) })
		})
	}
	b.Run("error", func(b *testing.B) {
		run(b, "fail", nil, func(r *schema.ReplyEnvelope) bool { return r.Error != nil && r.Error.Code == 2001 })
	})
}
