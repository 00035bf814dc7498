// Package aggregator dispatches the calls of one JSON-RPC message over NATS
// and gathers their answers.
//
// [Aggregator.Dispatch] publishes every call of a batch at once, each to the
// subject of its method with its own deadline, waits for the replies on
// NATS inboxes, and hands each answer over the moment it exists. A call
// that misses its deadline is answered with a retryable timeout for its id
// alone; a method that no worker serves is answered at once; notifications
// are published and never waited for. A batch is never held longer than
// its largest per-call deadline. The aggregator is the last
// [schema.Dispatcher] of the ingress's chain.
//
// Around each call sit the resilience policies: in-flight caps, global and
// per method ([WithMaxInFlight], [WithMethodMaxInFlight]); the liveness
// protocol ([WithHeartbeat]: workers acknowledge a call and send
// heartbeats, so a dead worker is noticed in a few heartbeats, and busy
// workers refuse calls they have no room for, which go to another worker);
// retries and hedges of retry-safe methods ([WithRetrySafe],
// [WithAckTimeout], [WithMaxAttempts], [WithHedge]); a circuit breaker per
// method ([WithBreaker]); and idempotency records in JetStream
// ([WithIdempotency]) shared by every ingress replica. All replies and
// progress messages of an aggregator arrive on one wildcard inbox
// subscription.
package aggregator
