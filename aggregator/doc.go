// Package aggregator dispatches the calls of one JSON-RPC message over NATS
// and gathers their answers.
//
// [Aggregator.Dispatch] publishes every call of a batch at once, each to the
// subject of its method with its own deadline, and hands each answer over
// the moment it exists. A call waiting on the bus holds no goroutine: it
// is an entry of the aggregator's table, keyed by the token that ends its
// reply subject, and moves from state to state (published, running,
// refused, parked, answered) on the messages its reply subject receives
// and on one timer that serves every deadline of every call. A call
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
// workers refuse calls they have no room for, which go to another worker;
// with [WithAckDelay], the workers of a method seen to acknowledge may
// hold back the ack of a short call, which then needs none);
// retries and hedges of retry-safe methods ([WithRetrySafe],
// [WithAckTimeout], [WithMaxAttempts], [WithHedge]); a circuit breaker per
// method ([WithBreaker]); and idempotency records in JetStream
// ([WithIdempotencyStore]) shared by every ingress replica. All replies and
// progress messages of an aggregator arrive on one wildcard inbox
// subscription, with liveness on or off. A call whose worker was lost
// while the connection to NATS was down is published again once it is
// back when it is retry-safe, within its deadline; another call is
// answered worker_lost once its worker's heartbeats lapse.
package aggregator
