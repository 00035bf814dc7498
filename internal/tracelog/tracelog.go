// Package tracelog adds the trace id of a record's context to every log
// line, so that a line about a call leads to its trace and back, and gives
// calls trace ids in a process that records no spans ([IDs]).
package tracelog

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Handler returns a handler that adds trace_id and span_id to each record
// whose context carries a valid span, unless the record has a trace_id
// already, and hands it to h.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !has(r, "trace_id") {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

// TraceID returns the trace id of ctx's span in hex, or "" when ctx
// holds none.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h.next.WithAttrs(as)} }
func (h handler) WithGroup(name string) slog.Handler    { return handler{h.next.WithGroup(name)} }

func has(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			found = true
			return false
		}
		return true
	})
	return found
}

// IDs returns a tracer provider for a process that records no spans but
// whose calls must still be found by a trace id, in its log lines and in
// its error answers: every span it starts is a span context only, with
// its parent's trace id, flags and state (the caller's traceparent) or a
// new trace id, unsampled, when there is none, and a new span id. Such a
// span never records, so whoever starts one sets no attributes on it, and
// what it costs is the context that carries it.
//
// An SDK provider with a sampler that never samples gives the same ids,
// but makes a span of its own per call and still records those of a
// caller's sampled trace, only to drop them: a quarter of the tracing's
// share of a bus call's CPU went there. The ids are random, not secret:
// nothing trusts a trace id.
func IDs() trace.TracerProvider { return idProvider{} }

type idProvider struct{ embedded.TracerProvider }

var _ trace.TracerProvider = idProvider{}

func (idProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return idTracer{} }

type idTracer struct{ embedded.Tracer }

var _ trace.Tracer = idTracer{}

// Start implements [trace.Tracer]. It reads none of opts: they shape a
// recorded span, and a span of this tracer never records. A span asked
// for as a new root ([trace.WithNewRoot]) still continues its parent's
// trace; toolbus starts none.
func (idTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	cfg := trace.SpanContextConfig{SpanID: newSpanID()}
	if parent.HasTraceID() {
		cfg.TraceID = parent.TraceID()
		cfg.TraceFlags = parent.TraceFlags()
		cfg.TraceState = parent.TraceState()
	} else {
		cfg.TraceID = newTraceID()
	}
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg))
	return ctx, trace.SpanFromContext(ctx)
}

// newTraceID returns a random trace id, never the invalid all-zero one.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID returns a random span id, never the invalid all-zero one.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// TraceParent returns the W3C traceparent header of sc, as
// propagation.TraceContext writes it ("00-<trace id>-<span id>-<flags>",
// with the sampled and random flags), or "" when sc is not valid. It makes one
// string, where the propagator fills a map to be read back.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:3], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	return string(b[:])
}

// ParseTraceParent reads a W3C traceparent header of version 00, the
// only form [TraceParent] writes, into a remote span context, by the
// rules propagation.TraceContext reads it with (lower-case hex, no
// field more, the reserved flag bits clear, ids not all zero, the
// sampled and random flags kept). It reports false for any other text,
// which is then left to the propagator: it makes no map and no carrier,
// which a call run in the process would make only to read this one
// string back.
func ParseTraceParent(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(cfg.TraceID[:], s[3:35]) || !lowerHex(cfg.SpanID[:], s[36:52]) || !lowerHex(flags[:], s[53:55]) || flags[0] > 3 {
		return trace.SpanContext{}, false
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

// lowerHex decodes src, lower-case hex of twice dst's length, into dst,
// and reports whether every character was a lower-case hex digit.
func lowerHex(dst []byte, src string) bool {
	for i := range dst {
		hi, ok1 := nibble(src[2*i])
		lo, ok2 := nibble(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
