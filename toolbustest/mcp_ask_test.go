package toolbustest_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// elicitingSession connects an MCP client at protocol version (the SDK's
// newest when empty) whose elicitation handler, when answer is not nil,
// sends each question's message and requested schema to asked and
// answers with answer; without one the client cannot elicit.
func elicitingSession(t *testing.T, c *toolbustest.Cluster, version string, answer *mcp.ElicitResult, asked chan<- *mcp.ElicitParams) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if answer != nil {
		opts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			select {
			case asked <- req.Params:
			default:
			}
			return answer, nil
		}
	}
	return mcpClient(t, c.BaseURL, version, opts, nil)
}

// mcpClient connects an MCP client with opts to the /mcp of the ingress
// at base, at protocol version (the SDK's newest when empty), over
// httpClient (the default when nil).
func mcpClient(t *testing.T, base, version string, opts *mcp.ClientOptions, httpClient *http.Client) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "toolbustest", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: httpClient},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to /mcp at %q: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	if version != "" && cs.InitializeResult().ProtocolVersion != version {
		t.Fatalf("negotiated protocol version = %s, want %s", cs.InitializeResult().ProtocolVersion, version)
	}
	return cs
}

// TestMCPConfirmElicited calls the demo's confirm, a tool that asks,
// through /mcp without a progress token, with the SDK's client and its
// elicitation handler: the front door runs it as a job and puts its
// question to the client, at 2025-06-18 with elicitation/create, at
// 2026-07-28 as the input request of the call's result, which the SDK's
// client answers and retries; the answer comes back in the tool's result.
// A client that cannot elicit gets cannot_ask at once, with a progress
// token too (a job of its own that could otherwise wait for an answer
// nobody can give).
func TestMCPConfirmElicited(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs())
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("confirm"); return ok }, "confirm appears")
	toolbustest.Eventually(t, func() bool { return c.Jobs.Promotable(context.Background(), "confirm") }, "a job runner serves confirm")

	tests := []struct {
		name     string
		answer   *mcp.ElicitResult
		progress bool
		want     string
		wantErr  string
	}{
		{name: "accept", answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}},
			want: `{"action":"deploy","confirmed":true}`},
		{name: "accept, not confirmed", answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": false}},
			want: `{"action":"deploy","confirmed":false}`},
		{name: "decline", answer: &mcp.ElicitResult{Action: "decline"},
			want: `{"action":"deploy","confirmed":false,"declined":true}`},
		{name: "cancel is declined", answer: &mcp.ElicitResult{Action: "cancel"},
			want: `{"action":"deploy","confirmed":false,"declined":true}`},
		{name: "accept with a progress token", answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}},
			progress: true, want: `{"action":"deploy","confirmed":true}`},
		{name: "client without elicitation", wantErr: schema.ReasonCannotAsk},
		{name: "client without elicitation, with a progress token", progress: true, wantErr: schema.ReasonCannotAsk},
	}
	for _, version := range []string{"2025-06-18", "2026-07-28"} {
		for _, tc := range tests {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				asked := make(chan *mcp.ElicitParams, 1)
				cs := elicitingSession(t, c, version, tc.answer, asked)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				params := &mcp.CallToolParams{Name: "confirm", Arguments: map[string]any{"action": "deploy"}}
				if tc.progress {
					params.SetProgressToken("p-1")
				}
				r, err := cs.CallTool(ctx, params)
				if err != nil {
					t.Fatalf("tools/call confirm: %v", err)
				}
				if tc.wantErr != "" {
					var e *schema.Error
					if b, _ := json.Marshal(r.Meta["toolbus/error"]); !r.IsError || json.Unmarshal(b, &e) != nil ||
						e.Code != schema.CodeToolError || e.Reason() != tc.wantErr {
						t.Fatalf("tools/call confirm = isError %v %q meta %v, want -32000 %s", r.IsError, textOf(r), r.Meta, tc.wantErr)
					}
					return
				}
				if r.IsError || textOf(r) != tc.want {
					t.Fatalf("tools/call confirm = isError %v %q, want %s", r.IsError, textOf(r), tc.want)
				}
				select {
				case p := <-asked:
					b, _ := json.Marshal(p.RequestedSchema)
					var s struct {
						Required []string `json:"required"`
					}
					if p.Message != "proceed with deploy?" || json.Unmarshal(b, &s) != nil || len(s.Required) != 1 || s.Required[0] != "confirmed" {
						t.Errorf("elicitation = %q schema %s, want confirm's question", p.Message, b)
					}
				default:
					t.Error("the client's elicitation handler was never called")
				}
			})
		}
	}
}

// TestMCPConfirmInputRequests follows the question of confirm at MCP
// 2026-07-28 by hand, with the SDK's client retrying nothing itself, on
// two ingresses that share the request state key: the call's result is
// the question as an input request with a request state; a changed
// state, a state brought to another tool and a retry without the
// response are invalid params; another caller's retry with the state is
// refused as the jobs refuse a job that is not the caller's, and answers
// nothing; the caller's retry on the other ingress answers the job and
// gets its result; and the same retry again gets the same result.
func TestMCPConfirmInputRequests(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"confirm", "echo", "rpc.jobs.*"}},
			{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"confirm", "echo", "rpc.jobs.*"}},
		}}), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.MCPStateKey = "the replicas' shared state key"
		}))
	other := c.AddIngress(t)
	toolbustest.Eventually(t, func() bool { return c.Jobs.Promotable(context.Background(), "confirm") }, "a job runner serves confirm")

	// The handler declares the elicitation capability; the client
	// retries nothing itself.
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, errors.New("the test answers by hand")
		},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}
	as := func(key string) *http.Client { return &http.Client{Transport: apiKeyTransport(key)} }
	const newest = "2026-07-28"
	alice := mcpClient(t, c.BaseURL, newest, opts, as("alice-key"))
	aliceThere := mcpClient(t, other.BaseURL, newest, opts, as("alice-key"))
	bob := mcpClient(t, other.BaseURL, newest, opts, as("bob-key"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := map[string]any{"action": "deploy"}

	r, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "confirm", Arguments: args})
	if err != nil {
		t.Fatalf("tools/call confirm: %v", err)
	}
	if !r.NeedsInput() || len(r.InputRequests) != 1 || r.RequestState == "" {
		t.Fatalf("tools/call confirm = needs input %v, %d input requests, request state %q; want one question and a state",
			r.NeedsInput(), len(r.InputRequests), r.RequestState)
	}
	var qid string
	for id, ir := range r.InputRequests {
		p, ok := ir.(*mcp.ElicitParams)
		if !ok || p.Message != "proceed with deploy?" {
			t.Fatalf("input request %q = %#v, want confirm's question", id, ir)
		}
		qid = id
	}
	state := r.RequestState
	retry := func(cs *mcp.ClientSession, name, state string, responses mcp.InputResponseMap) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, InputResponses: responses, RequestState: state})
	}
	yes := mcp.InputResponseMap{qid: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirmed": true}}}
	no := mcp.InputResponseMap{qid: &mcp.ElicitResult{Action: "decline"}}

	garbled := []byte(state)
	garbled[len("v1.")+2] ^= 1
	for _, tc := range []struct {
		name, tool, state string
		responses         mcp.InputResponseMap
	}{
		{"garbled state", "confirm", string(garbled), yes},
		{"state changed to another tool", "echo", retarget(t, state, "echo"), yes},
		{"state of another tool", "echo", state, yes},
		{"no response to the question", "confirm", state, mcp.InputResponseMap{"another": &mcp.ElicitResult{Action: "accept"}}},
	} {
		r, err := retry(aliceThere, tc.tool, tc.state, tc.responses)
		if e := (*jsonrpc.Error)(nil); !errors.As(err, &e) || e.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: tools/call = %v, %v; want -32602", tc.name, r, err)
		}
	}

	r, err = retry(bob, "confirm", state, yes)
	if err != nil {
		t.Fatalf("bob's retry with alice's state: %v", err)
	}
	var e *schema.Error
	if b, _ := json.Marshal(r.Meta["toolbus/error"]); !r.IsError || json.Unmarshal(b, &e) != nil || e.Code != schema.CodeJobNotFound {
		t.Fatalf("bob's retry with alice's state = isError %v %q meta %v; want -32007 job not found", r.IsError, textOf(r), r.Meta)
	}

	const declined = `{"action":"deploy","confirmed":false,"declined":true}`
	for _, attempt := range []string{"first", "again"} {
		r, err = retry(aliceThere, "confirm", state, no)
		if err != nil {
			t.Fatalf("alice's %s retry on the other ingress: %v", attempt, err)
		}
		if r.IsError || textOf(r) != declined {
			t.Fatalf("alice's %s retry on the other ingress = isError %v %q; want %s, bob's answer never given", attempt, r.IsError, textOf(r), declined)
		}
	}
}

// retarget returns the request state st with its tool changed to tool
// and its signature left as it was, as a client that tampers with it
// would send it.
func retarget(t *testing.T, st, tool string) string {
	t.Helper()
	parts := strings.Split(st, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var content map[string]any
	if len(parts) != 3 || err != nil || json.Unmarshal(b, &content) != nil {
		t.Fatalf("request state %q is not version, content and signature", st)
	}
	content["tool"] = tool
	b, _ = json.Marshal(content)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}
