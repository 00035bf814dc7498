package ingress

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/schema"
)

// fakeSubscriber is a jobs extension whose subscriptions answer the record
// {"caller": <who asked>} and stream nothing; it records every subscribe
// call it was given.
type fakeSubscriber struct {
	mu    sync.Mutex
	calls []schema.Call
}

var (
	_ Extension  = (*fakeSubscriber)(nil)
	_ Subscriber = (*fakeSubscriber)(nil)
)

func (f *fakeSubscriber) ServeRPC(context.Context, schema.Call) (json.RawMessage, *schema.Error) {
	return json.RawMessage(`{}`), nil
}

func (f *fakeSubscriber) Subscribe(_ context.Context, c schema.Call) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	result, _ := json.Marshal(map[string]string{"caller": c.Caller})
	return result, func(context.Context, func(string, json.RawMessage)) {}, nil
}

func (f *fakeSubscriber) subscribed() []schema.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]schema.Call(nil), f.calls...)
}

// TestSubscribeIsAdmitted checks that rpc.jobs.subscribe on a WebSocket
// goes through admission like every call: a caller not allowed it is
// refused -32005, a caller over its rate limit -32002, and the
// subscription is made for the caller who asked.
func TestSubscribeIsAdmitted(t *testing.T) {
	sub := &fakeSubscriber{}
	s, _ := newServer(t, WithExtension("rpc.jobs.", sub),
		WithCallerRateLimit("carol", quota.RateLimit{PerSecond: 0.001, Burst: 1}),
		WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"rpc.jobs.*"}},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"echo"}},
			{Name: "carol", SHA256: auth.HashAPIKey("carol-key"), Allow: []string{"rpc.jobs.subscribe"}},
		}}))
	const subscribe = `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.subscribe","params":{"id":"J1"}}`

	alice := dialWS(t, s, "X-Api-Key", "alice-key")
	send(t, alice, subscribe)
	if a := receiveOne(t, alice); a.Code != 0 || a.Result != `{"caller":"alice"}` {
		t.Errorf("alice's subscribe = %+v, want a subscription made for alice", a)
	}

	bob := dialWS(t, s, "X-Api-Key", "bob-key")
	send(t, bob, subscribe)
	if a := receiveOne(t, bob); a.Code != schema.CodeForbidden || a.Data["reason"] != "not_allowed" {
		t.Errorf("bob's subscribe = %+v, want -32005 not_allowed", a)
	}

	carol := dialWS(t, s, "X-Api-Key", "carol-key")
	send(t, carol, subscribe)
	if a := receiveOne(t, carol); a.Code != 0 {
		t.Errorf("carol's first subscribe = %+v, want a subscription", a)
	}
	send(t, carol, subscribe)
	if a := receiveOne(t, carol); a.Code != schema.CodeOverloaded || a.Data["limit"] != "rate_limit" {
		t.Errorf("carol's second subscribe = %+v, want -32002 rate_limit", a)
	}

	var callers []string
	for _, c := range sub.subscribed() {
		callers = append(callers, c.Caller)
	}
	if len(callers) != 2 || callers[0] != "alice" || callers[1] != "carol" {
		t.Errorf("subscriptions made for %q, want alice and carol alone", callers)
	}
}
