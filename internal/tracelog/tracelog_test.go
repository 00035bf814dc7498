package tracelog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestHandlerAddsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	log.InfoContext(ctx, "traced")
	log.InfoContext(context.Background(), "untraced")
	log.InfoContext(ctx, "own", "trace_id", "given")

	dec := json.NewDecoder(&buf)
	var lines []map[string]any
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines", len(lines))
	}
	if lines[0]["trace_id"] != sc.TraceID().String() || lines[0]["span_id"] != sc.SpanID().String() || lines[0]["component"] != "x" {
		t.Errorf("traced line %v", lines[0])
	}
	if _, ok := lines[1]["trace_id"]; ok {
		t.Errorf("untraced line %v has a trace_id", lines[1])
	}
	if lines[2]["trace_id"] != "given" {
		t.Errorf("a record's own trace_id was replaced: %v", lines[2])
	}
}
