package bus

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// HeaderCarrier lets a trace propagator read and write the headers of a NATS
// message. Its methods are those of OpenTelemetry's
// propagation.TextMapCarrier, so
//
//	propagation.TraceContext{}.Inject(ctx, bus.HeaderCarrier(msg.Header))
//
// puts the W3C trace context of ctx into msg, and Extract reads it back,
// without this package depending on OpenTelemetry.
//
// Unlike http.Header, nats.Header does not canonicalise names, and NATS
// keeps their case on the wire: the lower-case names a W3C propagator uses,
// "traceparent" ([schema.HeaderTraceparent]) and "tracestate", are stored
// and sent exactly so.
// Get still finds a header whose name differs only in case, since HTTP,
// where these headers come from, ignores case.
//
// A nil HeaderCarrier reads as empty; Set on it panics, as on a nil map.
type HeaderCarrier nats.Header

// Get returns the first value of key, or, when there is no header of that
// exact name, of a header whose name equals key but for case; "" when there
// is none.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values of key with value, keeping key's case.
func (c HeaderCarrier) Set(key, value string) {
	c[key] = []string{value}
}

// Keys returns the names of the headers, in no particular order.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
