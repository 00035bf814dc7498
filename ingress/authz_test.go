package ingress

import (
	"net/http"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func TestAuthorizeBatch(t *testing.T) {
	jobs := &fakeJobs{}
	s, f := newServer(t, WithExtension("rpc.jobs.", jobs),
		WithAuth(Auth{Keys: []APIKey{{Name: "alice", SHA256: HashAPIKey("k"), Allow: []string{"echo", "rpc.jobs.*"}}}}))
	body := `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},
		{"jsonrpc":"2.0","id":2,"method":"subtract","params":[3,1]},
		{"jsonrpc":"2.0","method":"subtract","params":[3,1]},
		{"jsonrpc":"2.0","id":3,"method":"rpc.jobs.submit","params":{"method":"subtract","params":[3,1]}},
		{"jsonrpc":"2.0","id":4,"method":"rpc.jobs.get","params":{"id":"J1"}}
	]`
	rec := serve(s.Handler(), post(body, "Authorization", "Bearer k"))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST = HTTP %d %s, want 200", rec.Code, rec.Body)
	}
	_, as := decode(t, rec.Body.Bytes())
	want := []struct {
		id   string
		code int
	}{{"1", 0}, {"2", schema.CodeForbidden}, {"3", schema.CodeForbidden}, {"4", 0}}
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
	if len(jobs.served) != 1 || jobs.served[0].Caller != "alice" {
		t.Errorf("jobs served %+v, want one rpc.jobs.get by alice", jobs.served)
	}
}
