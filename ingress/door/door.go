package door

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Ingress is what a front door needs of the ingress that mounts it.
type Ingress interface {
	// Request reads what the HTTP request r asks for the calls it
	// carries: who sent it (the caller the ingress's authentication put
	// in r's context) and the call headers (Toolbus-Timeout,
	// Idempotency-Key, Prefer). A malformed header is answered with the
	// error.
	Request(r *http.Request) (Request, *schema.Error)
}

// Request is what the ingress read from one HTTP request, and the ways to
// act under it. A Request stays usable after its HTTP request is over, so
// that a door can go on following a job it started (an A2A task followed
// for push notifications). The zero Request names no caller and has none
// of the functions; a door treats a missing one as allowing and
// answering nothing.
type Request struct {
	// Caller names the authenticated caller; empty when the ingress runs
	// without authentication or the request has no caller.
	Caller string
	// MayCall reports whether the caller may call every method that name,
	// a method or a pattern, matches.
	MayCall func(name string) bool
	// Call runs one call for the caller, under the request's headers,
	// through the ingress's plan and dispatcher chain like a call of any
	// other transport (method checks, authorization, deadlines, limits),
	// and returns its answer.
	Call func(ctx context.Context, req schema.Request) schema.Response
	// Hold counts a subscription of the caller against its bound before
	// the job it will follow exists, or returns the refusal a
	// subscription would get; release gives it back, once. A door that
	// follows the job it submits holds before it submits, so that a
	// caller at its bound is refused before its job exists.
	Hold func() (release func(), err *schema.Error)
	// Subscribe admits rpc.jobs.subscribe of job id for the caller, as
	// the ingress admits any call, and answers it: the job's record, and
	// stream, which calls notify with every later record until the job
	// is over or ctx ends. held, when not nil, is the release of a
	// subscription Hold counted, which this one takes the place of.
	Subscribe func(ctx context.Context, id string, held func()) (record json.RawMessage, stream func(ctx context.Context, notify func(method string, params json.RawMessage)), err *schema.Error)
	// Timeout returns the deadline the ingress gives a call of method
	// under this request; zero when it names none.
	Timeout func(method string) time.Duration
}
