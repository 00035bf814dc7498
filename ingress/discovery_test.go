package ingress

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// ann returns an announcement of worker with the given tools (JSON).
func ann(worker string, tools ...string) []byte {
	return fmt.Appendf(nil, `{"v":1,"worker":%q,"interval_ms":1000,"tools":[%s]}`, worker, strings.Join(tools, ","))
}

func newTestRegistry(t *testing.T) *discovery.Registry {
	t.Helper()
	r, err := discovery.New(discovery.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDiscoverRoutes(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", `{"name":"math.add"}`))
	s, _ := newServer(t, WithRegistry(r))
	defer s.mcp.Close()
	tests := []struct {
		name     string
		body     string
		wantCode int
	}{
		{"rpc.discover", `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`, 0},
		{"longer name", `{"jsonrpc":"2.0","id":1,"method":"rpc.discovery"}`, schema.CodeMethodNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := decodeOne(t, serve(s.Handler(), post(tt.body)).Body.Bytes())
			if a.Code != tt.wantCode {
				t.Fatalf("%s = code %d, want %d", tt.body, a.Code, tt.wantCode)
			}
			if tt.wantCode == 0 && !strings.Contains(a.Result, `"name":"math.add"`) {
				t.Errorf("rpc.discover = %s, want math.add", a.Result)
			}
		})
	}
}

func TestWithRegistryRefusesOverlaps(t *testing.T) {
	r := newTestRegistry(t)
	_, err := New(newFake(), WithLogger(discard), WithRegistry(r), WithExtension("rpc.discover.", discovery.Discoverer{}))
	if err == nil {
		t.Fatal("New with rpc.discover. as an extension = nil error, want an overlap")
	}
	if _, err := New(newFake(), WithRegistry(nil)); err == nil {
		t.Fatal("WithRegistry(nil) = nil error")
	}
}

// securedDiscovery serves an ingress with a registry and authentication
// over the tools echo, fail, secret and fam.*: alice may call echo and
// fam.*, bob echo alone, and ops, an operator, nothing but rpc.discover.
// It returns the server's URL.
func securedDiscovery(t *testing.T) string {
	t.Helper()
	reg := newTestRegistry(t)
	reg.Observe(ann("w1", `{"name":"echo"}`, `{"name":"fail"}`, `{"name":"fam.*","params":{"type":"object","required":["x"]}}`))
	reg.Observe(ann("w2", `{"name":"secret"}`, `{"name":"bad.schema","params":{"type":12}}`))
	s, _ := newServer(t, WithRegistry(reg), WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"rpc.discover", "echo", "fam.*", "bad.schema"}},
		{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"rpc.discover", "echo"}},
		{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Allow: []string{"rpc.discover"}, Operator: true},
	}}))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.mcp.Close()
		ts.Close()
	})
	return ts.URL
}

// TestDiscoveryListsWhatTheCallerMayCall checks rpc.discover and
// GET /openrpc.json with authentication on: a caller is shown the methods
// it may call and their problems, an operator every problem.
func TestDiscoveryListsWhatTheCallerMayCall(t *testing.T) {
	url := securedDiscovery(t)
	for _, tc := range []struct {
		key      string
		methods  []string
		problems []string
	}{
		{key: "alice-key", methods: []string{"echo", "fam.*"}, problems: []string{"bad.schema"}},
		{key: "bob-key", methods: []string{"echo"}},
		{key: "ops-key", problems: []string{"bad.schema"}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			var fromRPC struct {
				Result discovery.OpenRPC `json:"result"`
				Error  *schema.Error     `json:"error"`
			}
			postJSON(t, url+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`, &fromRPC, auth.APIKeyHeader, tc.key)
			if fromRPC.Error != nil {
				t.Fatalf("rpc.discover = %v", fromRPC.Error)
			}
			var fromGET discovery.OpenRPC
			getJSONAs(t, url+"/openrpc.json", &fromGET, auth.APIKeyHeader, tc.key)
			for name, doc := range map[string]discovery.OpenRPC{"rpc.discover": fromRPC.Result, "GET /openrpc.json": fromGET} {
				var methods, problems []string
				for _, m := range doc.Methods {
					methods = append(methods, m.Name)
				}
				for _, p := range doc.Problems {
					problems = append(problems, p.Method)
				}
				if !slices.Equal(methods, tc.methods) || !slices.Equal(problems, tc.problems) {
					t.Errorf("%s lists methods %q and problems %q, want %q and %q", name, methods, problems, tc.methods, tc.problems)
				}
			}
		})
	}
}

// postJSON POSTs a JSON body to url with the given header pairs and
// decodes the 200 answer into v.
func postJSON(t *testing.T, url, body string, v any, header ...string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	doJSON(t, r, v, header...)
}

// getJSONAs GETs url with the given header pairs and decodes the 200
// answer into v.
func getJSONAs(t *testing.T, url string, v any, header ...string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	doJSON(t, r, v, header...)
}

func doJSON(t *testing.T, r *http.Request, v any, header ...string) {
	t.Helper()
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = HTTP %d", r.Method, r.URL, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
}
