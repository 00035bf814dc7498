package worker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// errCanceledByClient is the cause of a handler's context when the client
// gave up on the call.
var errCanceledByClient = errors.New("worker: the client canceled the call")

// subscribeCancels listens on the cluster's cancel subject: a message names
// a call by its [schema.HeaderCallID], and the handler of that call, if this
// runtime holds it, sees its context canceled.
func (rt *Runtime) subscribeCancels() error {
	sub, err := rt.nc.Subscribe(rt.cfg.subjects.Cancel(), func(msg *nats.Msg) {
		if cancel, ok := rt.calls.Load(string(msg.Data)); ok {
			cancel.(context.CancelCauseFunc)(errCanceledByClient)
		}
	})
	if err != nil {
		return err
	}
	rt.cancelSub = sub
	return nil
}

// track registers the cancel function of a call that carries a bus call id
// and returns what untracks it.
func (rt *Runtime) track(msg *nats.Msg, cancel context.CancelCauseFunc) func() {
	id := msg.Header.Get(schema.HeaderCallID)
	if id == "" {
		return func() {}
	}
	rt.calls.Store(id, cancel)
	return func() { rt.calls.Delete(id) }
}

// stopCancels ends the cancel subscription once no call can be canceled.
func (rt *Runtime) stopCancels() {
	rt.mu.Lock()
	sub := rt.cancelSub
	rt.cancelSub = nil
	rt.mu.Unlock()
	if sub != nil {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			rt.log.Warn("unsubscribe from cancels", "err", err)
		}
	}
}
