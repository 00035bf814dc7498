// Package aggregator dispatches the calls of one JSON-RPC message over NATS
// and gathers their answers.
//
// [Aggregator.Dispatch] publishes every call of a batch at once, each to the
// subject of its method with its own deadline, and waits for the replies on
// NATS inboxes. A call that misses its deadline is answered with a retryable
// timeout for its id alone; a method that no worker serves is answered at
// once; notifications are published and never waited for. A batch is never
// held longer than its largest per-call deadline.
//
// [Aggregator.Stream] does the same but hands each answer over the moment it
// exists, for transports that stream.
package aggregator
