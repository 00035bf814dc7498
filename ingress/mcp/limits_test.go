package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress"
	toolbusmcp "github.com/toolbus/toolbus/ingress/mcp"
	"github.com/toolbus/toolbus/schema"
)

// nested returns a JSON object nested depth levels deep.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// TestMCPRequestLimits checks that the ingress's depth and body limits
// hold on /mcp before the SDK decodes a message: an initialize one level
// deeper than max_depth is answered 400, and one byte over max_body_bytes
// 413, each with the -32006 error naming the limit that POST /rpc
// answers; one at the limits is the SDK's to answer.
func TestMCPRequestLimits(t *testing.T) {
	const maxDepth, maxBody = 8, 64 << 10
	discard := slog.New(slog.DiscardHandler)
	reg, err := discovery.New(discovery.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ingress.New(echo, ingress.WithLogger(discard), ingress.WithRegistry(reg),
		ingress.WithLimits(ingress.Limits{MaxDepth: maxDepth, MaxBodyBytes: maxBody}))
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
	// The message, its params and capabilities are three levels; the
	// experimental capabilities bring the rest.
	initialize := func(experimental string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":` +
			experimental + `},"clientInfo":{"name":"test","version":"1"}}}`
	}
	padded := func(n int) string {
		body := initialize(`{"pad":""}`)
		return initialize(`{"pad":"` + strings.Repeat("p", n-len(body)) + `"}`)
	}
	for _, tc := range []struct {
		name   string
		body   string
		status int
		limit  string
	}{
		{name: "depth at the limit", body: initialize(nested(maxDepth - 3)), status: http.StatusOK},
		{name: "depth over the limit", body: initialize(nested(maxDepth - 2)), status: http.StatusBadRequest, limit: "max_depth"},
		{name: "9990 levels", body: initialize(nested(9990)), status: http.StatusBadRequest, limit: "max_depth"},
		{name: "body at the limit", body: padded(maxBody), status: http.StatusOK},
		{name: "body over the limit", body: padded(maxBody + 1), status: http.StatusRequestEntityTooLarge, limit: "max_body_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, ts.URL+toolbusmcp.Path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("POST /mcp = HTTP %d %.300s, want %d", resp.StatusCode, b, tc.status)
			}
			if tc.limit == "" {
				if !strings.Contains(string(b), `"protocolVersion"`) {
					t.Errorf("POST /mcp = %.300s, want the initialize result", b)
				}
				return
			}
			var got schema.Response
			if err := json.Unmarshal(b, &got); err != nil || got.Error == nil {
				t.Fatalf("POST /mcp = %.300s, want a JSON-RPC error", b)
			}
			var data struct {
				Limit string `json:"limit"`
				Max   int    `json:"max"`
			}
			_ = json.Unmarshal(got.Error.Data, &data)
			want := map[string]int{"max_depth": maxDepth, "max_body_bytes": maxBody}[tc.limit]
			if got.Error.Code != schema.CodeLimitExceeded || data.Limit != tc.limit || data.Max != want {
				t.Errorf("POST /mcp = %s, want -32006 naming %s with max %d", b, tc.limit, want)
			}
		})
	}
}
