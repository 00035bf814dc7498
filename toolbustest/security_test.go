package toolbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func whoami(rt *worker.Runtime) error {
	for _, m := range []string{"who.ami", "who.else", "secret"} {
		if err := rt.HandleFunc(m, func(_ context.Context, req *worker.Request) (any, error) {
			return req.Caller, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func securedCluster(t *testing.T) *toolbustest.Cluster {
	t.Helper()
	return toolbustest.Start(t,
		toolbustest.WithTools(whoami),
		toolbustest.WithJobs(),
		toolbustest.WithAuth(auth.Config{
			Keys: []auth.APIKey{
				{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"who.*", "rpc.jobs.*"}},
				{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"who.ami", "rpc.jobs.*"}},
			},
		}))
}

func TestCallerReachesTheWorker(t *testing.T) {
	c := securedCluster(t)
	tests := []struct {
		name   string
		header []string
		method string
		want   string
		code   int
	}{
		{name: "alice", header: []string{"Authorization", "Bearer alice-key"}, method: "who.ami", want: `"alice"`},
		{name: "bob by x-api-key", header: []string{"X-Api-Key", "bob-key"}, method: "who.ami", want: `"bob"`},
		{name: "bob denied", header: []string{"X-Api-Key", "bob-key"}, method: "who.else", code: schema.CodeForbidden},
		{name: "nobody may call secret", header: []string{"X-Api-Key", "alice-key"}, method: "secret", code: schema.CodeForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Call(t, tc.method, "", tc.header...)
			if tc.code != 0 {
				if r.Error == nil || r.Error.Code != tc.code {
					t.Fatalf("%s = %s %v, want code %d", tc.method, r.Result, r.Error, tc.code)
				}
				return
			}
			if r.Error != nil || string(r.Result) != tc.want {
				t.Fatalf("%s = %s %v, want %s", tc.method, r.Result, r.Error, tc.want)
			}
		})
	}
}

func TestUnauthenticatedIsRefusedBeforeParsing(t *testing.T) {
	c := securedCluster(t)
	status, body := c.Post(t, `this is not even JSON`)
	if status != http.StatusUnauthorized {
		t.Fatalf("POST without credentials = HTTP %d %s, want 401", status, body)
	}
	var r schema.Response
	if err := json.Unmarshal(body, &r); err != nil || r.Error == nil || r.Error.Code != schema.CodeForbidden {
		t.Errorf("401 body = %s, want a JSON-RPC error %d", body, schema.CodeForbidden)
	}
	resp, err := http.Get(c.BaseURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = HTTP %d, want 200 without credentials", resp.StatusCode)
	}
}

func TestJobsBelongToTheirCaller(t *testing.T) {
	c := securedCluster(t)
	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"who.ami"}},
		{"jsonrpc":"2.0","id":2,"method":"rpc.jobs.submit","params":{"method":"secret"}}
	]`, "X-Api-Key", "alice-key")
	if rs[0].Error != nil {
		t.Fatalf("submit who.ami = %v", rs[0].Error)
	}
	if rs[1].Error == nil || rs[1].Error.Code != schema.CodeForbidden {
		t.Fatalf("submit secret = %s %v, want -32005", rs[1].Result, rs[1].Error)
	}
	// The jobs layer checks the submitted method for the caller of every
	// transport, not only POST /rpc.
	ws := wsRoundTrip(t, c, "X-Api-Key", "alice-key")
	if r := ws(`{"jsonrpc":"2.0","id":9,"method":"rpc.jobs.submit","params":{"method":"secret"}}`); r.Error == nil || r.Error.Code != schema.CodeForbidden {
		t.Fatalf("submit secret over WebSocket = %s %v, want -32005", r.Result, r.Error)
	}
	var sub struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rs[0].Result, &sub); err != nil {
		t.Fatal(err)
	}
	get := `{"id":"` + sub.ID + `"}`
	if r := c.Call(t, "rpc.jobs.get", get, "X-Api-Key", "bob-key"); r.Error == nil || r.Error.Code != schema.CodeJobNotFound {
		t.Errorf("bob's rpc.jobs.get of alice's job = %s %v, want -32007", r.Result, r.Error)
	}
	if r := c.Call(t, "rpc.jobs.get", get, "X-Api-Key", "alice-key"); r.Error != nil {
		t.Errorf("alice's rpc.jobs.get = %v, want her job", r.Error)
	}
}

func TestMCPNeedsCredentials(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithTools(whoami), toolbustest.WithDiscovery(),
		toolbustest.WithAuth(auth.Config{
			Keys: []auth.APIKey{{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{">"}}},
		}))
	status, body := c.PostURL(t, c.BaseURL+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		"Accept", "application/json, text/event-stream")
	if status != http.StatusUnauthorized {
		t.Errorf("POST /mcp without credentials = HTTP %d %s, want 401", status, body)
	}
}

// wsRoundTrip opens a WebSocket connection to c's /rpc with the given
// header pairs and returns a function that sends one message and reads one
// answer.
func wsRoundTrip(t *testing.T, c *toolbustest.Cluster, header ...string) func(body string) schema.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return func(body string) schema.Response {
		t.Helper()
		if err := conn.Write(ctx, websocket.MessageText, []byte(body)); err != nil {
			t.Fatal(err)
		}
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r schema.Response
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("answer %s: %v", data, err)
		}
		return r
	}
}

// TestSubscribeToOwnJobsOnly checks rpc.jobs.subscribe with authentication
// on: a caller follows its own job, and another caller's is not found.
func TestSubscribeToOwnJobsOnly(t *testing.T) {
	c := securedCluster(t)
	r := c.Call(t, "rpc.jobs.submit", `{"method":"who.ami"}`, "X-Api-Key", "alice-key")
	var job struct{ ID string }
	if r.Error != nil || json.Unmarshal(r.Result, &job) != nil || job.ID == "" {
		t.Fatalf("alice's submit = %s %v", r.Result, r.Error)
	}
	subscribe := `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.subscribe","params":{"id":"` + job.ID + `"}}`

	r = wsRoundTrip(t, c, "X-Api-Key", "alice-key")(subscribe)
	var rec schema.JobRecord
	if r.Error != nil || json.Unmarshal(r.Result, &rec) != nil || rec.ID != job.ID {
		t.Errorf("alice's subscribe to her job = %s %v, want its record", r.Result, r.Error)
	}
	r = wsRoundTrip(t, c, "X-Api-Key", "bob-key")(subscribe)
	if !errors.Is(r.Error, schema.ErrJobNotFound) {
		t.Errorf("bob's subscribe to alice's job = %s %v, want -32007", r.Result, r.Error)
	}
}

// getJSON GETs url with the given header pairs into v, failing the test on
// anything but a 200.
func getJSON(t *testing.T, url string, v any, header ...string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestDashboardShowsOwnJobs checks the dashboard's jobs on a cluster: a
// caller sees its own, an operator everyone's.
func TestDashboardShowsOwnJobs(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithTools(whoami), toolbustest.WithJobs(),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"who.*", "rpc.jobs.*"}},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"who.*", "rpc.jobs.*"}},
			{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Operator: true},
		}}))
	r := c.Call(t, "rpc.jobs.submit", `{"method":"who.ami"}`, "X-Api-Key", "alice-key")
	var job struct{ ID string }
	if r.Error != nil || json.Unmarshal(r.Result, &job) != nil {
		t.Fatalf("alice's submit = %s %v", r.Result, r.Error)
	}
	jobsOf := func(key string) []string {
		var st dashboard.State
		getJSON(t, c.BaseURL+"/ui/api/state", &st, "X-Api-Key", key)
		if st.Jobs == nil || st.Jobs.Error != "" {
			t.Fatalf("dashboard jobs as %s = %+v", key, st.Jobs)
		}
		var ids []string
		for _, j := range st.Jobs.Recent {
			ids = append(ids, j.ID)
		}
		return ids
	}
	if got := jobsOf("bob-key"); len(got) != 0 {
		t.Errorf("bob's dashboard lists jobs %q, want none of alice's", got)
	}
	for _, key := range []string{"alice-key", "ops-key"} {
		if got := jobsOf(key); len(got) != 1 || got[0] != job.ID {
			t.Errorf("dashboard as %s lists jobs %q, want alice's %s", key, got, job.ID)
		}
	}
}

// TestDiscoveryShowsWhatTheCallerMayCall checks discovery on a cluster with
// authentication on: rpc.discover, GET /openrpc.json and MCP tools/list
// show bob the one tool he may call.
func TestDiscoveryShowsWhatTheCallerMayCall(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithTools(whoami), toolbustest.WithDiscovery(),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"who.ami", "rpc.discover"}},
		}}))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("secret"); return ok }, "tools appear")

	r := c.Call(t, discovery.Method, "", "X-Api-Key", "bob-key")
	var fromRPC, fromGET discovery.OpenRPC
	if r.Error != nil || json.Unmarshal(r.Result, &fromRPC) != nil {
		t.Fatalf("rpc.discover = %s %v", r.Result, r.Error)
	}
	getJSON(t, c.BaseURL+"/openrpc.json", &fromGET, "X-Api-Key", "bob-key")
	for name, doc := range map[string]discovery.OpenRPC{"rpc.discover": fromRPC, "GET /openrpc.json": fromGET} {
		if len(doc.Methods) != 1 || doc.Methods[0].Name != "who.ami" {
			t.Errorf("%s lists %+v, want who.ami alone", name, doc.Methods)
		}
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "bob", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.BaseURL + "/mcp",
		HTTPClient: &http.Client{Transport: apiKeyTransport("bob-key")}}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	defer cs.Close()
	if got := toolNames(t, cs); len(got) != 1 || got[0] != "who.ami" {
		t.Errorf("MCP tools/list = %q, want who.ami alone", got)
	}
}

// apiKeyTransport sends an API key with every request.
type apiKeyTransport string

func (k apiKeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(auth.APIKeyHeader, string(k))
	return http.DefaultTransport.RoundTrip(r)
}
