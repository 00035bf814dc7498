package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	toolbusmcp "github.com/toolbus/toolbus/ingress/mcp"
	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ann returns an announcement of worker with the given tools (JSON).
func ann(worker string, tools ...string) []byte {
	return fmt.Appendf(nil, `{"v":1,"worker":%q,"interval_ms":1000,"tools":[%s]}`, worker, strings.Join(tools, ","))
}

// echo answers echo with its params and every other method as no worker
// serves it.
var echo = schema.DispatcherFunc(func(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
	for i, c := range calls {
		switch {
		case c.IsNotification():
		case c.Method == "echo":
			emit(i, schema.Response{ID: c.ID, Result: json.RawMessage(`{}`)})
		default:
			emit(i, schema.Response{ID: c.ID, Error: schema.NewError(schema.CodeMethodNotFound, "method not found",
				map[string]any{"reason": "no_responders", "method": c.Method})})
		}
	}
})

// keyTransport adds an API key to every request.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(auth.APIKeyHeader, k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// securedMCP serves an ingress with discovery and authentication over the
// tools echo, fail, secret and fam.*: alice may call echo and fam.*, bob
// echo alone, and ops, an operator, nothing but rpc.discover. It returns
// the server's URL.
func securedMCP(t *testing.T) string {
	t.Helper()
	discard := slog.New(slog.DiscardHandler)
	reg, err := discovery.New(discovery.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	reg.Observe(ann("w1", `{"name":"echo"}`, `{"name":"fail"}`, `{"name":"fam.*","params":{"type":"object","required":["x"]}}`))
	reg.Observe(ann("w2", `{"name":"secret"}`, `{"name":"bad.schema","params":{"type":12}}`))
	s, err := ingress.New(echo, ingress.WithLogger(discard), ingress.WithRegistry(reg), ingress.WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"rpc.discover", "echo", "fam.*", "bad.schema"}},
		{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"rpc.discover", "echo"}},
		{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Allow: []string{"rpc.discover"}, Operator: true},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		ts.Close()
	})
	return ts.URL
}

// mcpAt connects an MCP client to url's /mcp with an API key at protocol
// revision version (the SDK's newest when empty).
func mcpAt(t *testing.T, url, key, version string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + toolbusmcp.Path,
		HTTPClient: &http.Client{Transport: keyTransport{key}}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to /mcp as %s: %v", key, err)
	}
	if version != "" && cs.InitializeResult().ProtocolVersion != version {
		t.Fatalf("negotiated protocol version = %s, want %s", cs.InitializeResult().ProtocolVersion, version)
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

// TestMCPToolsListedForTheCaller checks, at a revision with sessions and
// at the first without, that tools/list shows a caller the tools it may
// call, and that calling one it may not is answered as for a tool that
// does not exist.
func TestMCPToolsListedForTheCaller(t *testing.T) {
	url := securedMCP(t)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, tc := range []struct {
			key  string
			want []string
		}{
			{key: "alice-key", want: []string{"echo"}}, // fam.* is a pattern, which MCP does not list
			{key: "bob-key", want: []string{"echo"}},
			{key: "ops-key", want: nil},
		} {
			t.Run(version+"/"+tc.key, func(t *testing.T) {
				if got := listTools(t, mcpAt(t, url, tc.key, version)); !slices.Equal(got, tc.want) {
					t.Errorf("tools/list = %q, want %q", got, tc.want)
				}
			})
		}
		t.Run(version+"/hidden", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			bob := mcpAt(t, url, "bob-key", version)
			_, hidden := bob.CallTool(ctx, &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}})
			_, unknown := bob.CallTool(ctx, &mcp.CallToolParams{Name: "nothing", Arguments: map[string]any{}})
			if hidden == nil || unknown == nil || strings.ReplaceAll(hidden.Error(), "fail", "nothing") != unknown.Error() {
				t.Errorf("bob's tools/call of fail = %v, of an unknown tool = %v; want the same answer", hidden, unknown)
			}
		})
	}
}

// TestMCPSessionBoundToItsCaller checks that an MCP session (the
// revisions before 2026-07-28 have them) answers only the caller that
// made it: another caller's requests and DELETE under its id are refused,
// and the session goes on.
func TestMCPSessionBoundToItsCaller(t *testing.T) {
	url := securedMCP(t)
	alice := mcpAt(t, url, "alice-key", "2025-11-25")
	id := alice.ID()
	if id == "" {
		t.Fatal("alice's session has no id")
	}
	as := func(method, key, body string) int {
		t.Helper()
		r, err := http.NewRequest(method, url+toolbusmcp.Path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Session-Id", id)
		r.Header.Set(auth.APIKeyHeader, key)
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
