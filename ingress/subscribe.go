package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/schema"
)

// Subscriber is an [Extension] whose "subscribe" method (such as
// rpc.jobs.subscribe) streams server notifications over a WebSocket
// connection. Other transports answer that method through ServeRPC.
type Subscriber interface {
	// Subscribe answers the subscribe call of call.Caller, who may follow
	// only what is its own (admission has authorized and rate-limited the
	// call already), with result and returns stream, which the connection
	// runs on a goroutine of its own: it calls notify on that goroutine
	// for every notification, one after the other (a slow notify may make
	// it skip some, never the last), and returns when the subscription is
	// over or ctx (the connection's) ends. A subscription may count
	// against a bound of its caller's until stream returns, or until
	// Subscribe's ctx ends when stream is never run; one past it is
	// refused -32002 naming the limit (the jobs service's
	// caller_max_subscriptions).
	Subscribe(ctx context.Context, call schema.Call) (result json.RawMessage, stream func(ctx context.Context, notify func(method string, params json.RawMessage)), err *schema.Error)
}

// SubscriptionHolder is a [Subscriber] that can count a subscription
// before the job it follows exists, so that a front door that submits a
// job and then follows it (an A2A stream or blocking send) refuses a
// caller at its bound before the job is made. The jobs service is one.
type SubscriptionHolder interface {
	// HoldSubscription counts a subscription of caller, or returns the
	// refusal a subscription would get; release gives it back, once.
	HoldSubscription(caller string) (release func(), err *schema.Error)
	// SubscribeHeld is Subscribe for a subscription held already, which
	// release gives back when the subscription ends or is refused.
	SubscribeHeld(ctx context.Context, call schema.Call, release func()) (result json.RawMessage, stream func(ctx context.Context, notify func(method string, params json.RawMessage)), err *schema.Error)
}

// subscribeMethods returns the local methods of a WebSocket connection for
// the extensions that are subscribers: "<prefix>subscribe" for each. They
// go through admission like any call, and subscribe for the caller of the
// connection, so that a caller follows only what is its own.
func (cn *wsConn) subscribeMethods(ctx context.Context, local map[string]localMethod) {
	if cn.s.router == nil {
		return
	}
	for prefix, ext := range cn.s.router.extensions {
		if sub, ok := ext.(Subscriber); ok {
			local[prefix+"subscribe"] = localMethod{serve: func(c schema.Call) (json.RawMessage, *schema.Error) {
				return cn.subscribe(ctx, sub, c)
			}}
		}
	}
}

// subscribe starts a subscription of the connection. Subscriptions count
// against the connection's in-flight limit while they last.
func (cn *wsConn) subscribe(ctx context.Context, sub Subscriber, c schema.Call) (json.RawMessage, *schema.Error) {
	cn.mu.Lock()
	if cn.closed || cn.draining {
		cn.mu.Unlock()
		return nil, shuttingDown()
	}
	if cn.inFlight >= cn.s.cfg.wsMaxInFlight {
		cn.mu.Unlock()
		return nil, schema.NewError(schema.CodeOverloaded,
			fmt.Sprintf("overloaded: %d calls and subscriptions in flight on this connection (ws_max_in_flight)", cn.s.cfg.wsMaxInFlight),
			map[string]any{"retryable": true, "retry_after_ms": 100, "limit": "ws_max_in_flight"})
	}
	cn.inFlight++
	cn.mu.Unlock()
	result, stream, err := sub.Subscribe(ctx, c)
	if err != nil {
		cn.release()
		return nil, err
	}
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		defer cn.release()
		stream(ctx, func(method string, params json.RawMessage) { cn.notify(ctx, method, params) })
	}()
	return result, nil
}

// notify sends a server notification.
func (cn *wsConn) notify(ctx context.Context, method string, params json.RawMessage) {
	if !strings.HasPrefix(method, schema.ReservedPrefix) || !json.Valid(params) {
		cn.s.log.Error("refused a malformed notification", "method", method)
		return
	}
	m, _ := json.Marshal(method)
	b := make([]byte, 0, len(params)+len(m)+40)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = append(b, m...)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	b = append(b, '}')
	cn.send(ctx, b)
}
