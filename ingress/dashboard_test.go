package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
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
