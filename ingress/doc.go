// Package ingress is the HTTP front door of toolbus: it takes JSON-RPC 2.0
// messages from agents, applies the operator's limits, and hands the calls to
// a [Dispatcher] (the aggregator) in one piece.
//
// A [Server] serves three routes. POST /rpc parses a body with [schema.Parse],
// answers the elements that are invalid or name a method that can never be
// routed (a name outside the bus grammar, or one of the reserved rpc.* names)
// itself, and passes every other element, notifications included, to
// [Dispatcher.Dispatch] as one slice of [schema.Call], each carrying the
// deadline the client asked for in the [TimeoutHeader] header. The answer
// keeps request order: one object for a single request, an array for a batch,
// 204 No Content when there is nothing to answer. Every JSON-RPC answer is 200
// application/json; a request refused before parsing (wrong HTTP method, wrong
// content type, body over the limit, malformed header) gets the matching HTTP
// status with a JSON-RPC error body. GET /healthz answers while the process
// serves; GET /readyz tells a load balancer whether to send traffic, and turns
// unavailable as soon as [Server.Shutdown] starts.
//
// The ingress keeps no state between requests, so any number of replicas can
// run side by side.
package ingress
