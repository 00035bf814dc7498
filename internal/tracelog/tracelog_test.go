package tracelog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/propagation"
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

func TestIDsWithoutParent(t *testing.T) {
	tr := IDs().Tracer("test")
	seen := map[trace.TraceID]bool{}
	for range 100 {
		ctx, span := tr.Start(context.Background(), "call", trace.WithSpanKind(trace.SpanKindServer))
		sc := span.SpanContext()
		if !sc.IsValid() || sc.IsSampled() || sc.IsRemote() || span.IsRecording() {
			t.Fatalf("span without a parent: valid %v, sampled %v, remote %v, recording %v; want a valid local span context, unsampled, not recording",
				sc.IsValid(), sc.IsSampled(), sc.IsRemote(), span.IsRecording())
		}
		if got := trace.SpanContextFromContext(ctx); !got.Equal(sc) {
			t.Fatalf("context's span context = %v, want the span's %v", got, sc)
		}
		if seen[sc.TraceID()] {
			t.Fatalf("trace id %s given twice in 100 spans", sc.TraceID())
		}
		seen[sc.TraceID()] = true
		span.End()
	}
}

func TestIDsContinueTheParent(t *testing.T) {
	state, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		flags trace.TraceFlags
	}{
		{name: "sampled", flags: trace.FlagsSampled},
		{name: "unsampled", flags: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: tt.flags, TraceState: state, Remote: true,
			})
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
			ctx, span := IDs().Tracer("test").Start(ctx, "call")
			sc := span.SpanContext()
			if sc.TraceID() != parent.TraceID() || sc.TraceFlags() != tt.flags || sc.TraceState().String() != "vendor=x" {
				t.Errorf("child = trace %s, flags %v, state %q; want trace %s, flags %v, state %q",
					sc.TraceID(), sc.TraceFlags(), sc.TraceState(), parent.TraceID(), tt.flags, "vendor=x")
			}
			if sc.SpanID() == parent.SpanID() || !sc.SpanID().IsValid() || sc.IsRemote() || span.IsRecording() {
				t.Errorf("child span id %s (parent's %s), remote %v, recording %v; want a new valid local span id, not recording",
					sc.SpanID(), parent.SpanID(), sc.IsRemote(), span.IsRecording())
			}
			// What a worker is sent continues the call's span.
			carrier := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(ctx, carrier)
			want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + tt.flags.String()
			if got := carrier["traceparent"]; got != want {
				t.Errorf("traceparent = %q, want %q", got, want)
			}
		})
	}
}

func BenchmarkIDs(b *testing.B) {
	tr := IDs().Tracer("bench")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, span := tr.Start(ctx, "call")
		span.End()
	}
}

func TestTraceParent(t *testing.T) {
	tests := []struct {
		name string
		sc   trace.SpanContext
	}{
		{name: "sampled", sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd, 2}, TraceFlags: trace.FlagsSampled})},
		{name: "unsampled", sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{15: 1}, SpanID: trace.SpanID{7: 1}})},
		{name: "other flags", sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: 0xff})},
		{name: "invalid", sc: trace.SpanContext{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			carrier := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), tt.sc), carrier)
			if got, want := TraceParent(tt.sc), carrier["traceparent"]; got != want {
				t.Errorf("TraceParent(%v) = %q, want %q as the propagator writes it", tt.sc, got, want)
			}
		})
	}
}

// TestParseTraceParentAsThePropagator checks that ParseTraceParent reads
// every traceparent it accepts as propagation.TraceContext does, and
// accepts every version-00 header the propagator reads: hand-picked
// edges, then mutations of valid headers, one character at a time.
func TestParseTraceParentAsThePropagator(t *testing.T) {
	extract := func(s string) trace.SpanContext {
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
		return trace.SpanContextFromContext(ctx)
	}
	valid := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	inputs := []string{
		valid,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-02",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-04",
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"",
	}
	for i := range len(valid) {
		for _, c := range []byte{'0', 'f', 'g', 'F', '-', ' '} {
			b := []byte(valid)
			b[i] = c
			inputs = append(inputs, string(b))
		}
	}
	ids := IDs().Tracer("t")
	for range 50 {
		_, span := ids.Start(context.Background(), "s")
		inputs = append(inputs, TraceParent(span.SpanContext()))
	}
	accepted := 0
	for _, s := range inputs {
		got, ok := ParseTraceParent(s)
		want := extract(s)
		if ok {
			accepted++
			if !got.Equal(want) || !got.IsRemote() {
				t.Errorf("ParseTraceParent(%q) = %v, the propagator reads %v", s, got, want)
			}
			continue
		}
		if want.IsValid() && len(s) == 55 && s[:3] == "00-" {
			t.Errorf("ParseTraceParent(%q) refused a version-00 header the propagator reads as %v", s, want)
		}
	}
	if accepted < 50 {
		t.Errorf("ParseTraceParent accepted %d of the inputs, want at least the 50 TraceParent wrote", accepted)
	}
}
