package ingress

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// fakeJobs is an extension that records what it serves and can promote
// the methods in promotable.
type fakeJobs struct {
	mu          sync.Mutex
	served      []schema.Call
	promoted    []schema.Call
	promotable  map[string]bool
	lastTimeout time.Duration
}

var (
	_ Extension = (*fakeJobs)(nil)
	_ Promoter  = (*fakeJobs)(nil)
)

func (f *fakeJobs) ServeRPC(ctx context.Context, c schema.Call) (json.RawMessage, *schema.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served = append(f.served, c)
	switch c.Method {
	case "rpc.jobs.get":
		return json.RawMessage(`{"state":"queued"}`), nil
	case "rpc.jobs.submit":
		// As the jobs service does with jobs.WithAuthorize(Allowed).
		var inner struct{ Method string }
		if err := json.Unmarshal(c.Params, &inner); err != nil {
			return nil, schema.ErrorFrom(err)
		}
		if e := Allowed(ctx, inner.Method); e != nil {
			return nil, e
		}
		return json.RawMessage(`{"id":"J1","state":"queued"}`), nil
	}
	return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: "+c.Method, nil)
}

func (f *fakeJobs) Promotable(_ context.Context, method string) bool { return f.promotable[method] }

func (f *fakeJobs) RunAsJob(_ context.Context, c schema.Call, timeout time.Duration) (json.RawMessage, *schema.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.promoted = append(f.promoted, c)
	f.lastTimeout = timeout
	return nil, schema.NewError(schema.CodeTimeout, "timed out", map[string]any{"job_id": "J1"})
}

func TestExtensionRoutesItsMethods(t *testing.T) {
	jobs := &fakeJobs{promotable: map[string]bool{"sleep": true}}
	s, f := newServer(t, WithExtension("rpc.jobs.", jobs))
	for _, tc := range []struct {
		name       string
		body       string
		headers    []string
		want       []answer
		served     []string
		promoted   []string
		dispatched []string
	}{
		{
			name: "extension and tools in one batch, in request order",
			body: `[{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},
				{"jsonrpc":"2.0","id":2,"method":"rpc.jobs.get","params":{"id":"x"}},
				{"jsonrpc":"2.0","method":"rpc.jobs.get","params":{"id":"y"}},
				{"jsonrpc":"2.0","id":3,"method":"rpc.other","params":{}}]`,
			want: []answer{
				{ID: "1", Result: "[1]"},
				{ID: "2", Result: `{"state":"queued"}`},
				{ID: "3", Code: schema.CodeMethodNotFound},
			},
			served:     []string{"rpc.jobs.get", "rpc.jobs.get"},
			dispatched: []string{"echo"},
		},
		{
			name:       "without Prefer nothing is promoted",
			body:       `{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":1}}`,
			want:       []answer{{ID: "1", Result: `{"slept_ms":1}`}},
			dispatched: []string{"sleep"},
		},
		{
			name:     "Prefer respond-async promotes a job-capable tool",
			body:     `{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":1}}`,
			headers:  []string{"Prefer", "wait=5, respond-async", schema.HeaderTimeout, "250ms"},
			want:     []answer{{ID: "1", Code: schema.CodeTimeout}},
			promoted: []string{"sleep"},
		},
		{
			name:       "Prefer respond-async leaves other tools alone",
			body:       `{"jsonrpc":"2.0","id":1,"method":"echo","params":[2]}`,
			headers:    []string{"Prefer", "respond-async"},
			want:       []answer{{ID: "1", Result: "[2]"}},
			dispatched: []string{"echo"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs.mu.Lock()
			jobs.served, jobs.promoted = nil, nil
			jobs.mu.Unlock()
			before := len(f.dispatched())
			rec := serve(s.Handler(), post(tc.body, tc.headers...))
			_, got := decode(t, rec.Body.Bytes())
			if len(got) != len(tc.want) {
				t.Fatalf("answers = %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].ID != w.ID || got[i].Result != w.Result || got[i].Code != w.Code {
					t.Errorf("answer %d = %+v, want %+v", i, got[i], w)
				}
			}
			jobs.mu.Lock()
			defer jobs.mu.Unlock()
			if m := methods(jobs.served); !slices.Equal(m, tc.served) {
				t.Errorf("extension served %v, want %v", m, tc.served)
			}
			if m := methods(jobs.promoted); !slices.Equal(m, tc.promoted) {
				t.Errorf("promoted %v, want %v", m, tc.promoted)
			}
			if m := methods(f.dispatched()[before:]); !slices.Equal(m, tc.dispatched) {
				t.Errorf("dispatched %v, want %v", m, tc.dispatched)
			}
		})
	}
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	if jobs.lastTimeout != 250*time.Millisecond {
		t.Errorf("promoted call timeout = %v, want the client's 250ms", jobs.lastTimeout)
	}
}

func TestExtensionCallerAndAsyncReachTheCall(t *testing.T) {
	jobs := &fakeJobs{}
	s, _ := newServer(t, WithExtension("rpc.jobs.", jobs))
	serve(s.Handler(), post(`{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.get","params":{"id":"x"}}`, "Prefer", "respond-async"))
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	if len(jobs.served) != 1 || !jobs.served[0].Async || string(jobs.served[0].Params) != `{"id":"x"}` {
		t.Fatalf("extension got %+v, want one call with its params and Async set", jobs.served)
	}
}

func TestWithExtensionRejectsBadPrefixes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		ext    Extension
	}{
		{"not reserved", "jobs.", &fakeJobs{}},
		{"no trailing dot", "rpc.jobs", &fakeJobs{}},
		{"bare rpc", "rpc.", &fakeJobs{}},
		{"wildcard", "rpc.*.", &fakeJobs{}},
		{"nil extension", "rpc.jobs.", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(newFake(), WithExtension(tc.prefix, tc.ext)); err == nil {
				t.Fatalf("WithExtension(%q) accepted, want an error", tc.prefix)
			}
		})
	}
	if _, err := New(newFake(), WithExtension("rpc.jobs.", &fakeJobs{}), WithExtension("rpc.jobs.x.", &fakeJobs{})); err == nil {
		t.Fatal("overlapping extension prefixes accepted, want an error")
	}
}
