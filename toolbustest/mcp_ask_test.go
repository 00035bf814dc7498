package toolbustest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	client := mcp.NewClient(&mcp.Implementation{Name: "toolbustest", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.BaseURL + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: version})
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
// through /mcp without a progress token: the front door runs it as a job
// and puts its question to the client with elicitation/create, whose
// answer comes back in the tool's result; a client that cannot elicit
// gets cannot_ask at once, with a progress token too (a job of its own
// that could otherwise wait for an answer nobody can give).
func TestMCPConfirmElicited(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(nil))
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
	for _, version := range []string{"2025-06-18", ""} {
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
