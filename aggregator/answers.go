package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// The answers the aggregator gives a call itself, rather than a worker.

// noResponders is the answer of a call no worker is subscribed for.
func noResponders(method string) *schema.Error {
	return schema.NewError(schema.CodeMethodNotFound, "method not found: no worker serves "+method,
		map[string]any{"reason": schema.ReasonNoResponders, "method": method})
}

// busRetryAfter is the retry_after_ms of a call refused while NATS is
// away: the first reconnection attempts come sooner.
const busRetryAfter = time.Second

// busDisconnected answers a call that was not published because the
// ingress's NATS connection is not up (reconnecting, or closed): nothing
// ran, so the caller, or the job that made the call, may send it again.
func busDisconnected(nc *nats.Conn, method string) *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: not connected to NATS (the connection is "+
		strings.ToLower(nc.Status().String())+"); send the call again shortly",
		map[string]any{"retryable": true, "retry_after_ms": busRetryAfter.Milliseconds(),
			"reason": schema.ReasonBusDisconnected, "method": method})
}

// ctxError answers a call whose context ended: its own deadline passing is a
// retryable timeout; the caller going away is a cancellation.
func ctxError(ctx context.Context, method string, timeout time.Duration) *schema.Error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return timedOut(method, timeout, "")
	}
	return schema.NewError(schema.CodeCanceled, "canceled: the client gave up on "+method+" before it was answered",
		map[string]any{"method": method})
}

// workersBusy is the answer of a call every worker kept refusing for want
// of room.
func workersBusy(method string, waited time.Duration) *schema.Error {
	return schema.NewError(schema.CodeOverloaded,
		"overloaded: every worker of "+method+" stayed at its concurrency limit for "+waited.String(),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfter.Milliseconds(),
			"reason": schema.ReasonWorkersBusy, "method": method})
}

// workerLost is the answer of a call whose worker stopped sending
// heartbeats: it may have run in part, so only the client can tell whether
// sending it again is safe.
func workerLost(method string, silence time.Duration, attempts int) *schema.Error {
	return schema.NewError(schema.CodeUnavailable,
		"unavailable: the worker running "+method+" stopped answering",
		map[string]any{"retryable": true, "reason": schema.ReasonWorkerLost, "method": method,
			"silence_ms": silence.Milliseconds(), "attempts": attempts, "may_have_run": true})
}

// badReply is the answer for a reply the aggregator cannot read: the
// worker broke the protocol. Its text names the method and what was wrong,
// never a subject of the bus.
func badReply(method string, err error) *schema.Error {
	return schema.NewError(schema.CodeInternal,
		"internal error: the worker serving "+method+" sent a reply that does not follow the bus protocol ("+
			strings.TrimPrefix(err.Error(), "bus: reply: ")+"); its author should check it against schema/PROTOCOL.md or toolbus conform",
		map[string]any{"reason": schema.ReasonBadReply, "method": method})
}

// timedOut is the answer of a call of method that missed its deadline of
// timeout, whoever noticed first: the aggregator (no reason) or the worker
// (reason deadline_in_worker).
func timedOut(method string, timeout time.Duration, reason string) *schema.Error {
	// A deadline that waited in the ingress's queue comes with what was
	// left of it, such as 999.911119ms: say it to the millisecond.
	timeout = timeout.Round(time.Millisecond)
	data := map[string]any{"retryable": true, "timeout_ms": timeout.Milliseconds(), "method": method}
	if reason != "" {
		data["reason"] = reason
	}
	return schema.NewError(schema.CodeTimeout, fmt.Sprintf("timed out: %s did not answer within %v", method, timeout), data)
}
