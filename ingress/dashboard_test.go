package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
)

// jobQueries is a jobs section for the dashboard that answers one job
// named after whose jobs were asked for, and records the queries.
type jobQueries struct {
	mu   sync.Mutex
	seen []dashboard.JobsQuery
}

func (j *jobQueries) stats(_ context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error) {
	j.mu.Lock()
	j.seen = append(j.seen, q)
	j.mu.Unlock()
	owner := q.Caller
	if q.All {
		owner = "everyone"
	}
	return dashboard.JobsState{ByState: map[string]int{"queued": 1}, Recent: []dashboard.JobState{{ID: "job-of-" + owner, Method: "echo", State: "queued"}}}, nil
}

// dashboardAs reads /ui/api/state with the given API key.
func dashboardAs(t *testing.T, h http.Handler, key string) dashboard.State {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
	r.Header.Set(auth.APIKeyHeader, key)
	rec := serve(h, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ui/api/state as %s = HTTP %d %s", key, rec.Code, rec.Body)
	}
	var st dashboard.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDashboardScopedToCaller checks that with authentication on a caller's
// dashboard shows the methods and workers' methods it may call, its own
// errors and its own jobs, and an operator's shows everything.
func TestDashboardScopedToCaller(t *testing.T) {
	reg := newTestRegistry(t)
	reg.Observe(ann("w1", `{"name":"echo"}`, `{"name":"fail"}`))
	reg.Observe(ann("w2", `{"name":"secret"}`))
	jq := &jobQueries{}
	s, _ := newServer(t, WithRegistry(reg), WithJobStats(jq.stats), WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"echo", "fail"}},
		{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"echo"}},
		{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Operator: true},
	}}))
	defer s.mcp.Close()
	h := s.Handler()
	serve(h, post(`[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},
		{"jsonrpc":"2.0","method":"fail","id":"alice-fail"},
		{"jsonrpc":"2.0","method":"secret","id":"alice-secret"}]`, auth.APIKeyHeader, "alice-key"))
	serve(h, post(`{"jsonrpc":"2.0","method":"fail","id":"bob-fail"}`, auth.APIKeyHeader, "bob-key"))

	methodsOf := func(st dashboard.State) (names []string) {
		for _, m := range st.Methods {
			names = append(names, m.Method)
		}
		return names
	}
	errorsOf := func(st dashboard.State) (ids []string) {
		for _, e := range st.RecentErrors {
			ids = append(ids, e.ID)
		}
		slices.Sort(ids)
		return ids
	}
	workersOf := func(st dashboard.State) map[string][]string {
		out := map[string][]string{}
		for _, w := range st.Workers {
			out[w.ID] = w.Methods
		}
		return out
	}
	tests := []struct {
		key, caller string
		all         bool
		methods     []string
		errors      []string
		workers     map[string][]string
		job         string
		query       dashboard.JobsQuery
	}{
		{key: "bob-key", caller: "bob", methods: []string{"echo"}, errors: []string{`"bob-fail"`},
			workers: map[string][]string{"w1": {"echo"}}, job: "job-of-bob", query: dashboard.JobsQuery{Caller: "bob", Recent: dashboard.RecentJobs}},
		{key: "alice-key", caller: "alice", methods: []string{"echo", "fail"}, errors: []string{`"alice-fail"`, `"alice-secret"`},
			workers: map[string][]string{"w1": {"echo", "fail"}}, job: "job-of-alice", query: dashboard.JobsQuery{Caller: "alice", Recent: dashboard.RecentJobs}},
		{key: "ops-key", caller: "ops", all: true, methods: []string{"echo", "fail", "secret"},
			errors:  []string{`"alice-fail"`, `"alice-secret"`, `"bob-fail"`},
			workers: map[string][]string{"w1": {"echo", "fail"}, "w2": {"secret"}}, job: "job-of-everyone",
			query: dashboard.JobsQuery{Caller: "ops", All: true, Recent: dashboard.RecentJobs}},
	}
	for _, tc := range tests {
		t.Run(tc.caller, func(t *testing.T) {
			st := dashboardAs(t, h, tc.key)
			if st.Caller != tc.caller || st.AllCallers != tc.all {
				t.Errorf("caller, all_callers = %q, %v; want %q, %v", st.Caller, st.AllCallers, tc.caller, tc.all)
			}
			if got := methodsOf(st); !slices.Equal(got, tc.methods) {
				t.Errorf("methods = %q, want %q", got, tc.methods)
			}
			if got := errorsOf(st); !slices.Equal(got, tc.errors) {
				t.Errorf("recent errors = %q, want %q", got, tc.errors)
			}
			if got := workersOf(st); len(got) != len(tc.workers) || !slices.Equal(got["w1"], tc.workers["w1"]) || !slices.Equal(got["w2"], tc.workers["w2"]) {
				t.Errorf("workers = %v, want %v", got, tc.workers)
			}
			if st.Jobs == nil || len(st.Jobs.Recent) != 1 || st.Jobs.Recent[0].ID != tc.job {
				t.Errorf("jobs = %+v, want %s", st.Jobs, tc.job)
			}
			jq.mu.Lock()
			last := jq.seen[len(jq.seen)-1]
			jq.mu.Unlock()
			if last != tc.query {
				t.Errorf("jobs query = %+v, want %+v", last, tc.query)
			}
		})
	}
}

// TestDashboardOpenShowsEverything checks that without authentication the
// one anonymous caller sees every caller's data.
func TestDashboardOpenShowsEverything(t *testing.T) {
	jq := &jobQueries{}
	s, _ := newServer(t, WithJobStats(jq.stats))
	h := s.Handler()
	serve(h, post(`{"jsonrpc":"2.0","method":"fail","id":1}`))
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/ui/api/state", nil))
	var st dashboard.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if !st.AllCallers || st.Caller != "" || len(st.RecentErrors) != 1 || st.Jobs == nil || st.Jobs.Recent[0].ID != "job-of-everyone" {
		t.Errorf("open dashboard = %+v, want every caller's errors and jobs", st)
	}
}

// TestDashboardCookie checks that a key signed in at the dashboard goes
// on in its cookie, which shows the key's caller what the key in a
// header does: a caller its own, an operator everything; and that a
// missing or refused key is answered 401 as on every other route.
func TestDashboardCookie(t *testing.T) {
	reg := newTestRegistry(t)
	reg.Observe(ann("w1", `{"name":"echo"}`, `{"name":"fail"}`))
	s, _ := newServer(t, WithRegistry(reg), WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"echo"}},
		{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Operator: true},
	}}))
	defer s.mcp.Close()
	h := s.Handler()
	serve(h, post(`{"jsonrpc":"2.0","method":"fail","id":"alice-fail"}`, auth.APIKeyHeader, "alice-key"))

	signIn := func(t *testing.T, key string) *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, dashboard.SessionPath, strings.NewReader(`{"key":"`+key+`"}`))
		r.Header.Set("Content-Type", "application/json")
		return serve(h, r)
	}
	byCookie := func(t *testing.T, c *http.Cookie) dashboard.State {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
		r.AddCookie(c)
		rec := serve(h, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /ui/api/state with the cookie = HTTP %d %s", rec.Code, rec.Body)
		}
		var st dashboard.State
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	names := func(st dashboard.State) (methods, errs []string) {
		for _, m := range st.Methods {
			methods = append(methods, m.Method)
		}
		for _, e := range st.RecentErrors {
			errs = append(errs, e.ID)
		}
		return methods, errs
	}
	for _, key := range []string{"alice-key", "ops-key"} {
		t.Run(key, func(t *testing.T) {
			rec := signIn(t, key)
			var cookie *http.Cookie
			for _, c := range rec.Result().Cookies() {
				if c.Name == dashboard.CookieName {
					cookie = c
				}
			}
			if rec.Code != http.StatusOK || cookie == nil {
				t.Fatalf("sign-in with %s = HTTP %d %s, cookie %v; want 200 and the cookie", key, rec.Code, rec.Body, cookie)
			}
			gotMethods, gotErrs := names(byCookie(t, cookie))
			wantMethods, wantErrs := names(dashboardAs(t, h, key))
			if !slices.Equal(gotMethods, wantMethods) || !slices.Equal(gotErrs, wantErrs) {
				t.Errorf("by cookie: methods %q, errors %q; by header: %q, %q; want the same", gotMethods, gotErrs, wantMethods, wantErrs)
			}
		})
	}

	refusals := []struct {
		name, reason string
		rec          func(t *testing.T) *httptest.ResponseRecorder
	}{
		{"no key", schema.ReasonUnauthenticated, func(*testing.T) *httptest.ResponseRecorder {
			return serve(h, httptest.NewRequest(http.MethodGet, "/ui/api/state", nil))
		}},
		{"wrong key", schema.ReasonInvalidCredentials, func(t *testing.T) *httptest.ResponseRecorder { return signIn(t, "wrong") }},
		{"wrong header", schema.ReasonInvalidCredentials, func(*testing.T) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
			r.Header.Set("Authorization", "Bearer wrong")
			return serve(h, r)
		}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec(t)
			var resp struct {
				Error *schema.Error `json:"error"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &resp)
			if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" || resp.Error == nil || resp.Error.Reason() != tc.reason {
				t.Errorf("= HTTP %d, WWW-Authenticate %q, body %s; want 401, a challenge and reason %s", rec.Code, rec.Header().Get("WWW-Authenticate"), rec.Body, tc.reason)
			}
		})
	}
	// The page itself loads without a key, to ask for one.
	if rec := serve(h, httptest.NewRequest(http.MethodGet, "/ui/", nil)); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="auth-key"`) {
		t.Errorf("GET /ui/ without a key = HTTP %d, want the page with the key form", rec.Code)
	}
}

// TestDashboardRow checks that the dashboard names the row of a method as
// the statistics count its calls.
func TestDashboardRow(t *testing.T) {
	reg := newTestRegistry(t)
	reg.Observe(ann("w1", `{"name":"echo"}`))
	s, _ := newServer(t, WithRegistry(reg))
	defer s.mcp.Close()
	tests := []struct {
		name, method, want string
	}{
		{"announced", "echo", "echo"},
		{"never announced", "no.such.tool", labelUnknown},
		{"not a method name", "bad name", labelInvalid},
		{"reserved, no extension", "rpc.nope", labelInvalid},
		{"an extension", "rpc.discover", "rpc.discover"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.dashboardRow(tt.method); got != tt.want {
				t.Errorf("dashboardRow(%q) = %q, want %q", tt.method, got, tt.want)
			}
		})
	}
}
