package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
)

// Request is one call as a handler sees it. The runtime makes a new Request
// for every call; a handler may keep it after it returns, but must not change
// it while middleware or other code may still read it.
type Request struct {
	// ID is the JSON-RPC id exactly as the client sent it, or nil for a
	// notification. The bytes `null` are a null id, which is a request.
	ID json.RawMessage
	// Method is the concrete method name, even when the handler was
	// registered with a pattern such as "math.*".
	Method string
	// Params holds the raw JSON params, or nil when the call has none.
	Params json.RawMessage
	// Caller identifies who sent the call; empty when unauthenticated.
	Caller string
	// Deadline is when the call's answer is due; zero when the call has
	// none. The handler's context ends at the same time.
	Deadline time.Time
	// Header holds the message headers, such as the trace context; nil when
	// the message had none.
	Header nats.Header
}

// IsNotification reports whether the call carries no id and so its answer is
// never sent.
func (r *Request) IsNotification() bool { return r.ID == nil }

// Handler serves calls. ServeCall returns the result, which the runtime
// marshals to JSON (a json.RawMessage is sent unchanged, nil is a null
// result), or an error, which it maps to a JSON-RPC error (see the package
// documentation). ServeCall may be called from many goroutines at once, up to
// the method's concurrency limit; ctx ends at the call's deadline or when the
// runtime stops without waiting any longer.
type Handler interface {
	ServeCall(ctx context.Context, req *Request) (any, error)
}

// HandlerFunc adapts an ordinary function to a [Handler].
type HandlerFunc func(ctx context.Context, req *Request) (any, error)

var _ Handler = HandlerFunc(nil)

// ServeCall calls f(ctx, req).
func (f HandlerFunc) ServeCall(ctx context.Context, req *Request) (any, error) {
	return f(ctx, req)
}
