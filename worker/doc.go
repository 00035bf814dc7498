// Package worker is the SDK for writing toolbus tools in Go and the loop that
// serves them over NATS.
//
// A tool is a [Handler]: like an http.Handler it gets a [Request] (the
// method, the raw JSON params, the caller, the deadline and the message
// headers) but it returns a result or an error instead of writing a response.
// [Typed] adapts a plain function of a params struct, decoding the params and
// answering -32602 when they do not fit. A field of the struct whose json
// tag has neither omitempty nor omitzero is required, by the rule of the
// JSON Schema Typed derives and announces: params that lack it are
// answered -32602 naming it, whether or not the ingress validates params,
// so {} never reaches the function as a zero value. Every -32602 names its
// member in data.field as a JSON pointer into the params ("/text",
// "/items/0/name"), as [InvalidParams] does for a tool's own checks.
// [Middleware] wraps handlers and [Chain] composes middleware.
//
// A [Runtime] holds the tools of one process. [Runtime.Handle] registers a
// handler for a method or a pattern ("math.*" serves math.add and math.sub);
// [Runtime.Start] joins the cluster's queue group on each method's subject, so
// that every call reaches exactly one of the workers serving it; and
// [Runtime.Shutdown] drains: it stops taking calls, finishes those it holds and
// returns.
//
// For each call the runtime decodes the envelope, skips a call that is already
// past its deadline, takes one of the method's concurrency slots, runs the handler with a context that ends at the
// deadline, and replies on the call's inbox. A result is marshalled to JSON; an
// error becomes a JSON-RPC error: an [*schema.Error] anywhere in its chain is
// answered unchanged, so a tool's own codes and data pass through; a missed
// deadline is -32001, a cancellation -32004, any other error -32000 with its
// text. A panic is answered -32603 without a stack and the worker keeps
// serving. Notifications (calls without a reply subject) run the handler and
// answer nothing.
//
// When the aggregator asks for liveness (the Toolbus-Heartbeat header of
// schema/PROTOCOL.md, rule 8), the runtime acknowledges a call as it
// starts it and sends a heartbeat every interval until it replies, so a
// worker that dies is noticed in seconds; and a method whose slots are all
// taken refuses a call at once with a busy message, so that the call goes
// to a worker with room instead of queueing behind a slow one. A call from
// an aggregator that does not ask waits for a slot, at most until its
// deadline. The heartbeats of a running call also find out whether anyone
// still listens for its answer (rule 9): when its ingress died, or closed
// its connection without waiting for the answer, the handler's context is
// canceled with [ErrCallerGone] after as many heartbeats in a row that
// nobody heard as the aggregator waits for silent ones (3 by default),
// counted only while the worker's own connection is up.
//
// A tool may stop and ask its caller a question with [Ask] (rule 11 of
// PROTOCOL.md): approve an action, pick an account. Only a call whose
// caller can answer says so, with the Toolbus-Ask-Key header that a job's
// runner sets: the question goes to the aggregator on the call's reply
// subject, as a progress message, and the answer comes back on a subject
// under the runtime's inbox prefix, sealed with that call's key, so that
// another worker on the same credential can neither read nor forge it.
// While the tool waits its heartbeats go on and it keeps its slot. Any
// other call fails to ask at once with [ErrCannotAsk]. A tool that may ask
// says so in its descriptor with [Asks].
//
// Every call, over the bus or through [Runtime.Invoke], runs inside a server
// span that continues the caller's W3C trace ([WithTracerProvider]); the
// handler's context holds it, and the runtime's log lines about a call carry
// its trace_id. [WithMetrics] exports Prometheus counters, a latency
// histogram and in-flight gauges per registered pattern. [Runtime.Status]
// reports the last minute of calls per pattern and the newest error
// answers, and [Runtime.Ready] tells a readiness probe whether the runtime
// is serving.
//
// Built-in toolsets live in packages below this one, such as worker/demo.
package worker
