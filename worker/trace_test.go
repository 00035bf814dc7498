package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// The caller's span, as an ingress would send it.
const (
	parentTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpanID      = "00f067aa0ba902b7"
	parentTraceparent = "00-" + parentTraceID + "-" + parentSpanID + "-01"
)

// recorder returns a tracer provider whose ended spans the recorder holds.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, rec
}

// ended returns the ended span called name, waiting for it a while: a
// notification's span ends after nobody is waiting for it.
func ended(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var span sdktrace.ReadOnlySpan
	toolbustest.Eventually(t, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				span = s
				return true
			}
		}
		return false
	}, "span "+name+" ends")
	return span
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// tracedMsg is callMsg with the caller's traceparent.
func tracedMsg(t *testing.T, method string) *nats.Msg {
	t.Helper()
	msg := callMsg(t, method, "", time.Time{})
	msg.Header.Set(schema.HeaderTraceparent, parentTraceparent)
	return msg
}

func TestTraceContinuesTheCallersTrace(t *testing.T) {
	tp, rec := recorder(t)
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithTracerProvider(tp))
	if err := c.rt.HandleFunc("trace.*", func(ctx context.Context, _ *worker.Request) (any, error) {
		// A tool's own span nests under the worker's.
		_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("tool").Start(ctx, "tool work")
		span.End()
		return "ok", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	if _, err := c.send(tracedMsg(t, "trace.echo")); err != nil {
		t.Fatal(err)
	}

	s := ended(t, rec, "toolbus.worker trace.echo")
	if got := s.SpanContext().TraceID().String(); got != parentTraceID {
		t.Errorf("trace id = %s, want the caller's %s", got, parentTraceID)
	}
	if got := s.Parent(); got.SpanID().String() != parentSpanID || !got.IsRemote() {
		t.Errorf("parent = %s remote %v, want the caller's span %s, remote", got.SpanID(), got.IsRemote(), parentSpanID)
	}
	if s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span kind = %v, want server", s.SpanKind())
	}
	want := map[attribute.Key]string{
		"rpc.system":             "jsonrpc",
		"rpc.method":             "trace.echo",
		"rpc.jsonrpc.request_id": "1",
		"toolbus.worker.pattern": "trace.*",
	}
	got := attrs(s)
	for k, v := range want {
		if got[k].AsString() != v {
			t.Errorf("attribute %s = %q, want %q", k, got[k].String(), v)
		}
	}
	if _, ok := got["rpc.jsonrpc.error_code"]; ok {
		t.Errorf("a result's span has rpc.jsonrpc.error_code %v", got["rpc.jsonrpc.error_code"].String())
	}
	if s.Status().Code == codes.Error {
		t.Errorf("a result's span has status %v", s.Status())
	}

	inner := ended(t, rec, "tool work")
	if inner.Parent().SpanID() != s.SpanContext().SpanID() {
		t.Errorf("tool span's parent = %s, want the worker span %s", inner.Parent().SpanID(), s.SpanContext().SpanID())
	}
}

func TestTraceRecordsErrors(t *testing.T) {
	tp, rec := recorder(t)
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithTracerProvider(tp))
	if err := c.rt.HandleFunc("pay", func(context.Context, *worker.Request) (any, error) {
		return nil, &schema.Error{Code: 2001, Message: "insufficient funds"}
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("crash", func(context.Context, *worker.Request) (any, error) {
		panic("boom")
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	tests := []struct {
		method string
		code   int64
	}{
		{"pay", 2001},
		{"crash", schema.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			r, err := c.send(tracedMsg(t, tc.method))
			if err != nil {
				t.Fatal(err)
			}
			e := r.Err()
			if e == nil {
				t.Fatalf("%s answered a result, want an error", tc.method)
			}
			s := ended(t, rec, "toolbus.worker "+tc.method)
			if got := attrs(s)["rpc.jsonrpc.error_code"].AsInt64(); got != tc.code {
				t.Errorf("rpc.jsonrpc.error_code = %d, want %d", got, tc.code)
			}
			if st := s.Status(); st.Code != codes.Error || st.Description != e.Message {
				t.Errorf("status = %v %q, want Error %q", st.Code, st.Description, e.Message)
			}
		})
	}
}

func TestTraceNotificationsAndRoots(t *testing.T) {
	tp, rec := recorder(t)
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithTracerProvider(tp))
	if err := c.rt.HandleFunc("note", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("plain", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	subject, _ := subjects.Call("note")
	note, err := bus.CallMsg(subject, &schema.CallEnvelope{Method: "note"}, time.Time{}, parentTraceparent)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.caller.PublishMsg(note); err != nil {
		t.Fatal(err)
	}
	s := ended(t, rec, "toolbus.worker note")
	if got := s.SpanContext().TraceID().String(); got != parentTraceID {
		t.Errorf("notification's trace id = %s, want %s", got, parentTraceID)
	}
	if v, ok := attrs(s)["rpc.jsonrpc.request_id"]; ok {
		t.Errorf("notification's span has rpc.jsonrpc.request_id %q, want none", v.String())
	}

	// Without a traceparent the worker's span starts a trace.
	c.result(t, "plain", "")
	if p := ended(t, rec, "toolbus.worker plain").Parent(); p.IsValid() {
		t.Errorf("span of an untraced call has parent %v, want none", p.SpanID())
	}
}

func TestTraceInvoke(t *testing.T) {
	tp, rec := recorder(t)
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithTracerProvider(tp))
	if err := c.rt.HandleFunc("job", func(context.Context, *worker.Request) (any, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	call := schema.Call{Request: schema.Request{ID: []byte(`"j1"`), Method: "job"}, TraceParent: parentTraceparent}

	if _, e := c.rt.Invoke(context.Background(), call, nil); e != nil {
		t.Fatal(e)
	}
	s := ended(t, rec, "toolbus.worker job")
	if s.Parent().SpanID().String() != parentSpanID {
		t.Errorf("Invoke's span parent = %s, want the call's traceparent %s", s.Parent().SpanID(), parentSpanID)
	}
	if got := attrs(s)["rpc.jsonrpc.request_id"].AsString(); got != `"j1"` {
		t.Errorf("rpc.jsonrpc.request_id = %s, want %s", got, `"j1"`)
	}

	// A span in ctx wins over the call's traceparent.
	ctx, runner := tp.Tracer("runner").Start(context.Background(), "runner")
	if _, e := c.rt.Invoke(ctx, call, nil); e != nil {
		t.Fatal(e)
	}
	runner.End()
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() == "toolbus.worker job" && s.Parent().SpanID() == runner.SpanContext().SpanID() {
			found = true
		}
	}
	if !found {
		t.Errorf("no span of Invoke under the span of its ctx %s", runner.SpanContext().SpanID())
	}
}

// logLines decodes the JSON log lines with the given message.
func logLines(t *testing.T, logs *syncBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

func TestLogsCarryTraceID(t *testing.T) {
	tests := []struct {
		name string
		opts []worker.Option
	}{
		// The caller's trace id is logged even when the program traces
		// nothing itself.
		{"default tracer provider", nil},
		{"recording tracer provider", []worker.Option{worker.WithTracerProvider(sdktrace.NewTracerProvider())}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncBuffer{}
			logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := newCluster(t, bus.EmbeddedConfig{}, append(tc.opts, worker.WithLogger(logger))...)
			if err := c.rt.HandleFunc("fail", func(context.Context, *worker.Request) (any, error) {
				return nil, &schema.Error{Code: 2001, Message: "no"}
			}); err != nil {
				t.Fatal(err)
			}
			c.start(t)
			if _, err := c.send(tracedMsg(t, "fail")); err != nil {
				t.Fatal(err)
			}
			note := tracedMsg(t, "fail")
			note.Reply = ""
			if err := c.caller.PublishMsg(note); err != nil {
				t.Fatal(err)
			}
			late := tracedMsg(t, "fail")
			late.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(time.Now().Add(-time.Second)))
			if err := c.caller.PublishMsg(late); err != nil {
				t.Fatal(err)
			}
			for _, msg := range []string{"call", "notification failed", "skipped a call already past its deadline"} {
				var lines []map[string]any
				toolbustest.Eventually(t, func() bool {
					lines = logLines(t, logs, msg)
					return len(lines) > 0
				}, "the log has a line "+strconv.Quote(msg))
				if len(lines) == 0 {
					t.Fatalf("no log line %q; logs:\n%s", msg, logs)
				}
				for _, l := range lines {
					if l["trace_id"] != parentTraceID || l["span_id"] == nil || l["method"] != "fail" || l["id"] != "1" {
						t.Errorf("log line %v, want trace_id %s, a span_id, method fail and id 1", l, parentTraceID)
					}
				}
			}
		})
	}
}
