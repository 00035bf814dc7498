package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
)

// keyTransport adds an API key to every request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(APIKeyHeader, k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// securedMCP serves an ingress with discovery and authentication over the
// tools echo, fail, secret and fam.*: alice may call echo and fam.*, bob
// echo alone, and ops, an operator, nothing but rpc.discover. It returns
// the server's URL.
func securedMCP(t *testing.T) string {
	t.Helper()
	reg := newTestRegistry(t)
	reg.Observe(ann("w1", echoTool, `{"name":"fail"}`, famTool))
	reg.Observe(ann("w2", `{"name":"secret"}`, badSchema))
	s, _ := newServer(t, WithDiscovery(reg), WithAuth(Auth{Keys: []APIKey{
		{Name: "alice", SHA256: HashAPIKey("alice-key"), Allow: []string{"rpc.discover", "echo", "fam.*", "bad.schema"}},
		{Name: "bob", SHA256: HashAPIKey("bob-key"), Allow: []string{"rpc.discover", "echo"}},
		{Name: "ops", SHA256: HashAPIKey("ops-key"), Allow: []string{"rpc.discover"}, Operator: true},
	}}))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.mcp.close()
		ts.Close()
	})
	return ts.URL
}

// mcpAs connects an MCP client to url's /mcp with an API key.
func mcpAs(t *testing.T, url, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + MCPPath,
		HTTPClient: &http.Client{Transport: keyTransport{key}}}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp as %s: %v", key, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func listTools(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// TestMCPToolsListedForTheCaller checks that tools/list shows a caller the
// tools it may call, and that calling one it may not is answered as for a
// tool that does not exist.
func TestMCPToolsListedForTheCaller(t *testing.T) {
	url := securedMCP(t)
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{key: "alice-key", want: []string{"echo"}}, // fam.* is a pattern, which MCP does not list
		{key: "bob-key", want: []string{"echo"}},
		{key: "ops-key", want: nil},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := listTools(t, mcpAs(t, url, tc.key)); !slices.Equal(got, tc.want) {
				t.Errorf("tools/list = %q, want %q", got, tc.want)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bob := mcpAs(t, url, "bob-key")
	_, hidden := bob.CallTool(ctx, &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}})
	_, unknown := bob.CallTool(ctx, &mcp.CallToolParams{Name: "nothing", Arguments: map[string]any{}})
	if hidden == nil || unknown == nil || strings.ReplaceAll(hidden.Error(), "fail", "nothing") != unknown.Error() {
		t.Errorf("bob's tools/call of fail = %v, of an unknown tool = %v; want the same answer", hidden, unknown)
	}
}

// TestMCPSessionBoundToItsCaller checks that an MCP session answers only
// the caller that made it: another caller's requests and DELETE under its
// id are refused, and the session goes on.
func TestMCPSessionBoundToItsCaller(t *testing.T) {
	url := securedMCP(t)
	alice := mcpAs(t, url, "alice-key")
	id := alice.ID()
	if id == "" {
		t.Fatal("alice's session has no id")
	}
	as := func(method, key, body string) int {
		t.Helper()
		r, err := http.NewRequest(method, url+MCPPath, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Session-Id", id)
		r.Header.Set(APIKeyHeader, key)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const list = `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
	for _, tc := range []struct{ name, method, body string }{
		{"tools/list", http.MethodPost, list},
		{"tools/call", http.MethodPost, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{}}}`},
		{"event stream", http.MethodGet, ""},
		{"delete", http.MethodDelete, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := as(tc.method, "bob-key", tc.body); got != http.StatusForbidden && got != http.StatusNotFound {
				t.Errorf("bob's %s %s in alice's session = HTTP %d, want 403 or 404", tc.method, tc.name, got)
			}
		})
	}
	if got := listTools(t, alice); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("alice's tools/list after bob's attempts = %q, want her session alive", got)
	}
	if got := as(http.MethodDelete, "alice-key", ""); got != http.StatusNoContent {
		t.Errorf("alice's DELETE of her session = HTTP %d, want 204", got)
	}
}

// TestDiscoveryListsWhatTheCallerMayCall checks rpc.discover and
// GET /openrpc.json with authentication on: a caller is shown the methods
// it may call and their problems, an operator every problem.
func TestDiscoveryListsWhatTheCallerMayCall(t *testing.T) {
	url := securedMCP(t)
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
				Result OpenRPC       `json:"result"`
				Error  *schema.Error `json:"error"`
			}
			postJSON(t, url+"/rpc", `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`, &fromRPC, APIKeyHeader, tc.key)
			if fromRPC.Error != nil {
				t.Fatalf("rpc.discover = %v", fromRPC.Error)
			}
			var fromGET OpenRPC
			getJSONAs(t, url+"/openrpc.json", &fromGET, APIKeyHeader, tc.key)
			for name, doc := range map[string]OpenRPC{"rpc.discover": fromRPC.Result, "GET /openrpc.json": fromGET} {
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
