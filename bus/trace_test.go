package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// The carrier must fit the propagator's interface without bus importing it.
var _ propagation.TextMapCarrier = bus.HeaderCarrier(nil)

func TestHeaderCarrierRoundTrip(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=abc,other=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
		Remote:     true,
	})
	prop := propagation.TraceContext{}

	h := nats.Header{}
	prop.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), bus.HeaderCarrier(h))

	const wantParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := h.Get(schema.HeaderTraceparent); got != wantParent {
		t.Errorf("header %q = %q, want %q (headers %v)", schema.HeaderTraceparent, got, wantParent, h)
	}
	if got := h.Get("tracestate"); got != "vendor=abc,other=1" {
		t.Errorf("header tracestate = %q, want %q (headers %v)", got, "vendor=abc,other=1", h)
	}
	keys := bus.HeaderCarrier(h).Keys()
	slices.Sort(keys)
	if want := []string{"traceparent", "tracestate"}; !slices.Equal(keys, want) {
		t.Errorf("Keys() = %v, want %v", keys, want)
	}

	got := trace.SpanContextFromContext(prop.Extract(context.Background(), bus.HeaderCarrier(h)))
	if !got.Equal(sc) {
		t.Errorf("Extract(Inject(%v)) = %v, want it back", sc, got)
	}
}

// TestHeaderCarrierOverNATS sends the injected headers through a server:
// NATS keeps the names' case, so the exact lower-case names come back.
func TestHeaderCarrierOverNATS(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("trace.test")
	if err != nil {
		t.Fatal(err)
	}
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msg := nats.NewMsg("trace.test")
	bus.HeaderCarrier(msg.Header).Set(schema.HeaderTraceparent, parent)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Header[schema.HeaderTraceparent]; !ok || len(v) != 1 || v[0] != parent {
		t.Errorf("received headers %v, want %q: [%q]", got.Header, schema.HeaderTraceparent, parent)
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), bus.HeaderCarrier(got.Header)))
	if want := "4bf92f3577b34da6a3ce929d0e0e4736"; sc.TraceID().String() != want {
		t.Errorf("extracted trace id = %s, want %s", sc.TraceID(), want)
	}
}

func TestHeaderCarrierGet(t *testing.T) {
	tests := []struct {
		name   string
		header nats.Header
		key    string
		want   string
	}{
		{"exact lower case", nats.Header{"traceparent": {"a"}}, "traceparent", "a"},
		{"other case", nats.Header{"Traceparent": {"b"}}, "traceparent", "b"},
		{"exact wins over other case", nats.Header{"Traceparent": {"b"}, "traceparent": {"a"}}, "traceparent", "a"},
		{"first value", nats.Header{"tracestate": {"x", "y"}}, "tracestate", "x"},
		{"absent", nats.Header{"Toolbus-Deadline": {"1"}}, "traceparent", ""},
		{"empty values", nats.Header{"traceparent": {}}, "traceparent", ""},
		{"nil header", nil, "traceparent", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bus.HeaderCarrier(tc.header).Get(tc.key); got != tc.want {
				t.Errorf("Get(%q) = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}
