package client

import (
	"context"
	"errors"
	"fmt"
)

// Batch builds a JSON-RPC batch call by call; [Batch.Send] sends it as one
// message and each [Future] then holds its own call's outcome. A Batch is
// not safe for concurrent use and is sent once.
type Batch struct {
	c      *Client
	opts   callSettings
	optErr error
	calls  []*call
	sent   bool
}

// Batch returns an empty batch. Its options apply to every call of it; see
// [Timeout] for how a batch's timeout is chosen.
func (c *Client) Batch(opts ...CallOption) *Batch {
	b := &Batch{c: c}
	b.optErr = applyCallOptions(&b.opts, opts)
	return b
}

// Future is the outcome of one call of a [Batch], known once the batch is
// sent.
type Future struct {
	c *call
}

// Add adds a call of method with params, encoded as by [Client.Call], and
// returns its future. Params that cannot be encoded, or an invalid option,
// become the call's outcome and the call is left out of the message.
func (b *Batch) Add(method string, params any, opts ...CallOption) *Future {
	var cs callSettings
	cl, err := b.c.newCall(method, params, true)
	if err == nil {
		err = applyCallOptions(&cs, opts)
	}
	switch {
	case err != nil:
		if cl == nil {
			cl = &call{method: method}
		}
		cl.err = err
	case b.sent:
		cl.err = errors.New("client: call added to a batch already sent")
	default:
		cl.timeout = cs.timeout
		cl.err = ErrNotSent
		b.calls = append(b.calls, cl)
	}
	return &Future{c: cl}
}

// Notify adds a notification of method with params. It returns an error at
// once when the params cannot be encoded; whether the notification was
// delivered is part of [Batch.Send]'s error.
func (b *Batch) Notify(method string, params any) error {
	if b.sent {
		return errors.New("client: notification added to a batch already sent")
	}
	cl, err := b.c.newCall(method, params, false)
	if err != nil {
		return err
	}
	b.calls = append(b.calls, cl)
	return nil
}

// Len returns the number of calls and notifications in the batch.
func (b *Batch) Len() int { return len(b.calls) }

// Send sends the batch as one message and waits for its answer. Responses
// are matched to calls by id, whatever their order.
//
// Send's error is about the message as a whole: a transport failure (then
// every call has it as its outcome), an error the server answered for the
// whole message, or responses with ids the batch did not have or answered
// twice. A nil error means the message was delivered and its answer read;
// each call's own outcome, result or error, is in its [Future]. An empty
// batch sends nothing.
//
// With [WithRetry], the calls that failed with retryable errors are sent
// again, in a batch of their own; a batch holding notifications is never
// re-sent whole.
func (b *Batch) Send(ctx context.Context) error {
	if b.sent {
		return errors.New("client: batch sent twice")
	}
	b.sent = true
	if b.optErr != nil {
		for _, cl := range b.calls {
			cl.err = b.optErr
		}
		return b.optErr
	}
	if len(b.calls) == 0 {
		return nil
	}
	timeout := b.opts.timeout
	for _, cl := range b.calls {
		if cl.timeout > 0 && (timeout == 0 || cl.timeout < timeout) {
			timeout = cl.timeout
		}
	}
	whole, problems := b.c.exchange(ctx, b.calls, true, timeout)
	if whole == nil && problems == nil {
		return nil
	}
	return fmt.Errorf("client: batch of %d: %w", len(b.calls), errors.Join(whole, problems))
}

// ID returns the id the call is sent with: a JSON string.
func (f *Future) ID() string { return f.c.id }

// Err returns the call's outcome: nil for a result, the [*schema.Error] the
// server answered, or why there is no answer ([ErrNotSent] before
// [Batch.Send]).
func (f *Future) Err() error { return f.c.err }

// Decode decodes the call's result into v as [Client.Call] does, or
// returns the call's error.
func (f *Future) Decode(v any) error { return f.c.decode(v) }
