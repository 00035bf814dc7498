package a2a_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/ingress"
	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolbustest"
)

// nested returns a JSON object nested depth levels deep.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// TestRequestLimits checks that the ingress's depth and body limits hold
// on /a2a before the SDK decodes a request: a tasks/get one level deeper
// than max_depth, or one byte over max_body_bytes, is refused naming the
// limit, and one at the limits is answered by the front door.
func TestRequestLimits(t *testing.T) {
	const maxDepth, maxBody = 8, 64 << 10
	c := toolbustest.Start(t, toolbustest.WithTools(tools(newGate())), toolbustest.WithJobs(), toolbustest.WithDiscovery(),
		toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Limits = ingress.Limits{MaxDepth: maxDepth, MaxBodyBytes: maxBody}
		}))
	// The request object and its params are two levels; the metadata
	// brings the rest.
	get := func(metadata string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nothing","metadata":` + metadata + `}}`
	}
	padded := func(n int) string {
		body := get(`{"pad":""}`)
		return get(`{"pad":"` + strings.Repeat("p", n-len(body)) + `"}`)
	}
	for _, tc := range []struct {
		name  string
		body  string
		code  int
		limit string
	}{
		{name: "depth at the limit", body: get(nested(maxDepth - 2)), code: -32001},
		{name: "depth over the limit", body: get(nested(maxDepth - 1)), code: -32000, limit: "max_depth"},
		{name: "9990 levels", body: get(nested(9990)), code: -32000, limit: "max_depth"},
		{name: "body at the limit", body: padded(maxBody), code: -32001},
		{name: "body over the limit", body: padded(maxBody + 1), code: -32000, limit: "max_body_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := c.PostURL(t, c.BaseURL+toolbusa2a.Path, tc.body)
			var resp struct {
				Error struct {
					Code int `json:"code"`
					Data struct {
						Limit string  `json:"limit"`
						Max   float64 `json:"max"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &resp); err != nil || status != http.StatusOK {
				t.Fatalf("POST /a2a = %d %s, want 200 with a JSON-RPC answer", status, b)
			}
			if got := resp.Error; got.Code != tc.code || got.Data.Limit != tc.limit {
				t.Errorf("POST /a2a = %s, want code %d naming limit %q", b, tc.code, tc.limit)
			}
			if want := map[string]float64{"max_depth": maxDepth, "max_body_bytes": maxBody}[tc.limit]; resp.Error.Data.Max != want {
				t.Errorf("POST /a2a = %s, want max %v", b, want)
			}
		})
	}
}
