package ingress

import (
	"context"
	"net/http"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

func TestAuthorizeBatch(t *testing.T) {
	jobs := &fakeJobs{}
	s, f := newServer(t, WithExtension("rpc.jobs.", jobs),
		WithAuth(auth.Config{Keys: []auth.APIKey{{Name: "alice", SHA256: auth.HashAPIKey("k"), Allow: []string{"echo", "rpc.jobs.*"}}}}))
	body := `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},
		{"jsonrpc":"2.0","id":2,"method":"subtract","params":[3,1]},
		{"jsonrpc":"2.0","method":"subtract","params":[3,1]},
		{"jsonrpc":"2.0","id":3,"method":"rpc.jobs.submit","params":{"method":"subtract","params":[3,1]}},
		{"jsonrpc":"2.0","id":4,"method":"rpc.jobs.get","params":{"id":"J1"}},
		{"jsonrpc":"2.0","id":5,"method":"rpc.jobs.submit","params":{"method":"echo","params":[1]}}
	]`
	rec := serve(s.Handler(), post(body, "Authorization", "Bearer k"))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST = HTTP %d %s, want 200", rec.Code, rec.Body)
	}
	_, as := decode(t, rec.Body.Bytes())
	want := []struct {
		id   string
		code int
	}{{"1", 0}, {"2", schema.CodeForbidden}, {"3", schema.CodeForbidden}, {"4", 0}, {"5", 0}}
	if len(as) != len(want) {
		t.Fatalf("answers = %+v, want %d", as, len(want))
	}
	for i, w := range want {
		if as[i].ID != w.id || as[i].Code != w.code {
			t.Errorf("answer %d = id %s code %d, want id %s code %d", i, as[i].ID, as[i].Code, w.id, w.code)
		}
	}
	if got := methods(f.dispatched()); len(got) != 1 || got[0] != "echo" {
		t.Errorf("dispatched %v, want only echo", got)
	}
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	// The submit of a method alice may not call reached the jobs layer,
	// which refused it through Allowed: the ingress knows nothing of
	// rpc.jobs.submit's params.
	if len(jobs.served) != 3 {
		t.Fatalf("jobs served %+v, want two submits and a get", jobs.served)
	}
	for _, c := range jobs.served {
		if c.Caller != "alice" {
			t.Errorf("jobs served %s for %q, want alice", c.Method, c.Caller)
		}
	}
}

func TestAllowedReadsTheCallerOfTheContext(t *testing.T) {
	if e := Allowed(context.Background(), "anything"); e != nil {
		t.Errorf("Allowed without a caller (an ingress without auth) = %v, want nil", e)
	}
	ctx := context.WithValue(context.Background(), callerKey{}, &auth.Principal{Name: "bob", Allow: []string{"echo", "math.*"}})
	for _, m := range []string{"echo", "math.add"} {
		if e := Allowed(ctx, m); e != nil {
			t.Errorf("Allowed(bob, %s) = %v, want nil", m, e)
		}
	}
	e := Allowed(ctx, "admin.reset")
	if e == nil || e.Code != schema.CodeForbidden || e.Reason() != schema.ReasonNotAllowed {
		t.Errorf("Allowed(bob, admin.reset) = %v, want -32005 not_allowed", e)
	}
}
