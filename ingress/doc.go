// Package ingress is the HTTP front door of toolbus: it takes JSON-RPC
// messages from agents over several transports, applies the operator's
// limits, and hands the calls to its dispatcher chain ([Server.chain]),
// which ends at the aggregator.
//
// Every transport turns what it receives into []schema.Call and goes
// through the same core: [schema.Parse] under the [Limits], the same method
// checks (a name outside the bus grammar, or one of the reserved rpc.*
// names, is answered -32601 and never dispatched), the deadline the client
// asked for in the [schema.HeaderTimeout] header, settled once by the
// declared policy ([WithDeadline]), and the one chain. No transport has a
// dispatch path of its own. The routes of [Server.Handler]:
//
//   - POST /rpc with a JSON body: JSON-RPC 2.0 singles, batches and
//     notifications, handed to the chain in one piece. The
//     answer keeps request order: one object for a single request, an
//     array for a batch, 204 No Content when there is nothing to answer.
//     Every JSON-RPC answer is 200 application/json; a request refused
//     before parsing (wrong HTTP method, wrong content type, body over the
//     limit, malformed header) gets the matching HTTP status with a
//     JSON-RPC error body.
//
//   - POST /rpc with "Accept: text/event-stream" ([EventStream]): the same
//     message, answered as server-sent events through
//     the chain. Each answer is one unnamed event whose data is
//     the JSON-RPC response, sent and flushed the moment it exists:
//     first the answers the ingress has at once (invalid elements, methods
//     that are never routed), then each call's in completion order. A
//     final "done" event, data {"answers": N}, ends the stream. Comment
//     lines (": ping") keep it alive while calls run ([WithSSEHeartbeat]).
//     A message that cannot be answered element by element (a parse
//     error, an empty batch, a limit of the parser) is one event then done;
//     requests refused before parsing get the same plain JSON answers and
//     HTTP statuses as without events, and a message of notifications only
//     is 204.
//
//   - GET /rpc with a WebSocket upgrade: JSON-RPC messages in text frames,
//     on a connection that stays open. Calls of one connection run
//     concurrently; a single request's answer is sent the moment it exists,
//     a batch's answers go out together as one array. A connection has at
//     most [WithWebSocketMaxInFlight] calls in flight (more are answered
//     -32002 with retry_after_ms), messages are bounded by the body limit
//     (a larger one is answered -32006 and the connection closed with
//     1009), the server pings the peer and closes it when pongs stop
//     ([WithWebSocketPing]), and browsers from other origins are refused
//     unless allowed ([WithWebSocketOrigins]). The [CancelMethod]
//     rpc.cancel cancels one call in flight (it needs no allow pattern:
//     it reaches only the connection's own calls); closing the connection
//     cancels all of them. A canceled call is answered -32004. An
//     extension's subscribe method, such as rpc.jobs.subscribe ([Subscriber]),
//     streams notifications on the connection; it is admitted like any call.
//
//   - POST /v1/tools/{method}/invoke: a plain REST call for services that do
//     not speak JSON-RPC. The body is the params (a JSON object or array;
//     empty for none); the answer is {"success": true, "data": ...,
//     "request_id": ...} or {"success": false, "error": {"code", "message",
//     "data"}, "request_id": ...} with the HTTP status [StatusOf] gives the
//     error. The request id comes from the [RequestIDHeader] header when it
//     is sane, is made up otherwise, and is the call's JSON-RPC id.
//
//   - GET /healthz answers while the process serves; GET /readyz tells a
//     load balancer whether to send traffic, and turns unavailable as soon
//     as [Server.Shutdown] starts.
//
//   - GET /ui/ is the dashboard (package
//     [github.com/toolbus/toolbus/ingress/dashboard], [WithDashboard]): an
//     embedded page and the data it polls, each caller's own.
//
//   - With [WithRegistry] (a [discovery.Registry] of the tools the workers
//     announce): GET /openrpc.json, the OpenRPC document of the live tools
//     the caller may call, as rpc.discover answers it on every transport;
//     and the MCP front door at /mcp (package [github.com/toolbus/toolbus/ingress/mcp]),
//     which reaches the ingress through one seam: it asks what an HTTP
//     request's headers and caller say, and runs each tools/call through
//     [Server.plan] and the chain like a call of any other transport. The
//     registry's layer of the chain ([discovery.Layer]) validates params,
//     bounds deadlines by the advertised timeouts and answers -32003 for a
//     known method no worker serves now.
//
//   - With [WithA2A]: the A2A front door at POST /a2a and its public agent
//     card at /.well-known/agent-card.json (package
//     [github.com/toolbus/toolbus/ingress/a2a]), behind the same seam as
//     MCP's: its tasks are jobs, submitted, read, canceled and followed
//     with rpc.jobs.* calls admitted and run for the request's caller
//     like the calls of any other transport.
//
// With [WithJSONRPC1], requests without a "jsonrpc" member are read as
// JSON-RPC 1.0 on every JSON-RPC transport and answered in 1.0 form.
//
// Security and admission sit in front of that core. With [WithAuth] every
// route but the probes needs an API key or a bearer JWT, checked by one
// middleware on the mux before any body is read (a request without one is
// answered 401 with a WWW-Authenticate challenge) through package
// [github.com/toolbus/toolbus/ingress/auth]; each call is then
// checked in plan against its caller's allowed method patterns (-32005
// for that id alone), its caller's bytes of answers not yet written
// ([WithCallerMaxBytesInFlight]) and its caller's token bucket
// ([WithRateLimit]), both -32002 with retry_after_ms, and carries its
// caller to the workers. Those counts, and that of connections per client
// address ([WithMaxConnsPerAddr]), live in package
// [github.com/toolbus/toolbus/ingress/quota]; the message log's choice of
// bodies and their redaction in [github.com/toolbus/toolbus/ingress/msglog]. What
// a caller is shown is its own ([auth.Config] says what an operator sees):
// discovery lists the methods it may call, the dashboard its own errors and
// jobs, an MCP session answers only the caller that made it, and an A2A
// task is its caller's alone. The
// [schema.HeaderIdempotencyKey] header names the calls of its request
// ([schema.Call.IdempotencyKey]).
//
// The ingress keeps no state between requests, so any number of replicas
// can run side by side.
package ingress
