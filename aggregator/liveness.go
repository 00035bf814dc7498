package aggregator

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// exchange publishes a call on the aggregator's inbox and waits for its
// reply, watching the progress messages of the liveness protocol: a busy
// worker's refusal publishes the call again after a short backoff, for
// another worker; a call whose worker went silent after acknowledging it
// is published again when retry-safe, and otherwise answered -32003 at
// once; a retry-safe call nobody acknowledged is published again after the
// ack timeout. Every attempt shares the reply subject and the bus call id,
// so the first reply of any of them answers the call, and a cancel
// message reaches all of them.
func (a *Aggregator) exchange(ctx context.Context, c *schema.Call, timeout time.Duration, msg *nats.Msg, callID string) ([]byte, *schema.Error) {
	subject, p, closeInbox := a.inbox.open()
	defer closeInbox()
	msg.Reply = subject
	msg.Header.Set(schema.HeaderHeartbeat, strconv.FormatInt(a.heartbeat.Milliseconds(), 10))
	msg.Header.Set(schema.HeaderHeartbeatMisses, strconv.Itoa(a.misses))
	safe := a.retrySafe(c.Method)

	attempts := 0 // publications that may have run the call
	publish := func() *schema.Error {
		if err := a.nc.PublishMsg(msg); err != nil {
			return a.requestError(ctx, c, timeout, err)
		}
		return nil
	}
	if e := publish(); e != nil {
		return nil, e
	}
	attempts++

	// ack fires when a retry-safe call went unacknowledged for the ack
	// timeout; live when an acknowledged call's worker went silent; retry
	// when a refused call is due to be published again. A stopped timer
	// never fires.
	ack := time.NewTimer(a.ackTimeout)
	live := time.NewTimer(time.Hour)
	retry := time.NewTimer(time.Hour)
	hedge := time.NewTimer(time.Hour)
	defer ack.Stop()
	defer live.Stop()
	defer retry.Stop()
	defer hedge.Stop()
	live.Stop()
	retry.Stop()
	hedge.Stop()
	if safe && a.hedge > 0 && attempts < a.maxAttempts {
		hedge.Reset(a.hedge)
	}
	if !safe || attempts >= a.maxAttempts {
		ack.Stop()
	}
	silence := time.Duration(a.misses) * a.heartbeat
	backoff := busyBackoffMin
	var firstBusy time.Time
	again := func() *schema.Error {
		if e := publish(); e != nil {
			return e
		}
		if safe && attempts < a.maxAttempts {
			ack.Reset(a.ackTimeout)
		}
		return nil
	}
	for {
		select {
		case m := <-p.reply:
			if attempts > 1 {
				// Another attempt may still be running somewhere.
				a.cancelCall(c, callID)
			}
			return a.readReply(c, m, attempts)
		case v := <-p.progress:
			ack.Stop()
			if v == schema.ProgressBusy {
				live.Stop()
				now := time.Now()
				if firstBusy.IsZero() {
					firstBusy = now
				}
				if now.Sub(firstBusy) >= a.busyWait {
					return nil, workersBusy(c.Method, a.busyWait)
				}
				retry.Reset(backoff)
				backoff = min(2*backoff, busyBackoffMax)
				continue
			}
			live.Reset(silence)
		case <-retry.C:
			if e := again(); e != nil {
				return nil, e
			}
		case <-hedge.C:
			if attempts < a.maxAttempts {
				attempts++
				if e := publish(); e != nil {
					return nil, e
				}
			}
		case <-ack.C:
			if attempts >= a.maxAttempts {
				continue // a hedge took the last attempt
			}
			attempts++
			if e := again(); e != nil {
				return nil, e
			}
			a.log.Info("call not acknowledged, published again", "method", c.Method, "attempt", attempts)
		case <-live.C:
			if len(p.progress) > 0 || len(p.reply) > 0 {
				// The worker spoke while this goroutine waited to run,
				// and select chose among the ready cases at random: a
				// busy aggregator must not blame the worker for its own
				// delay. Read what came first.
				live.Reset(silence)
				continue
			}
			if !safe || attempts >= a.maxAttempts {
				a.log.Warn("worker lost a call", "method", c.Method, "id", string(c.ID), "silence", silence)
				return nil, workerLost(c.Method, silence, attempts)
			}
			attempts++
			if e := again(); e != nil {
				return nil, e
			}
			a.log.Info("worker lost a retry-safe call, published again", "method", c.Method, "attempt", attempts)
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				a.cancelCall(c, callID)
			}
			return nil, a.ctxError(ctx, c, timeout)
		}
	}
}

// readReply turns a reply message into the call's answer.
func (a *Aggregator) readReply(c *schema.Call, m *nats.Msg, attempts int) ([]byte, *schema.Error) {
	env, err := bus.ReadReply(m)
	if err != nil {
		if errors.Is(err, bus.ErrNoResponders) {
			if attempts > 1 {
				// The method had a worker for the first attempt; it is
				// gone now.
				return nil, schema.NewError(schema.CodeUnavailable, "unavailable: no worker left for "+c.Method,
					map[string]any{"retryable": true, "reason": schema.ReasonNoResponders, "method": c.Method, "attempts": attempts})
			}
			return nil, noResponders(c.Method)
		}
		return nil, schema.NewError(schema.CodeInternal, "internal error: bad reply from worker: "+err.Error(),
			map[string]any{"reason": schema.ReasonBadReply, "method": c.Method})
	}
	if e := env.Err(); e != nil {
		return nil, e
	}
	return env.Result, nil
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
