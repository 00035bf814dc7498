package ingress

import (
	"net/http"
	"slices"
	"testing"
)

// TestSpecExamples sends every example of section 7 of the JSON-RPC 2.0
// specification over POST /rpc and compares the answer with the
// specification's, response by response in request order.
func TestSpecExamples(t *testing.T) {
	tests := []struct {
		name string
		body string
		// want is the specification's response; empty means 204.
		want string
		// dispatched are the methods handed to the dispatcher.
		dispatched []string
	}{
		{
			name:       "positional params",
			body:       `{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}`,
			want:       `{"jsonrpc": "2.0", "result": 19, "id": 1}`,
			dispatched: []string{"subtract"},
		},
		{
			name:       "positional params reversed",
			body:       `{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}`,
			want:       `{"jsonrpc": "2.0", "result": -19, "id": 2}`,
			dispatched: []string{"subtract"},
		},
		{
			name:       "named params",
			body:       `{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}`,
			want:       `{"jsonrpc": "2.0", "result": 19, "id": 3}`,
			dispatched: []string{"subtract"},
		},
		{
			name:       "named params reordered",
			body:       `{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}`,
			want:       `{"jsonrpc": "2.0", "result": 19, "id": 4}`,
			dispatched: []string{"subtract"},
		},
		{
			name:       "notification",
			body:       `{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}`,
			dispatched: []string{"update"},
		},
		{
			name:       "notification without params",
			body:       `{"jsonrpc": "2.0", "method": "foobar"}`,
			dispatched: []string{"foobar"},
		},
		{
			name:       "non-existent method",
			body:       `{"jsonrpc": "2.0", "method": "foobar", "id": "1"}`,
			want:       `{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}`,
			dispatched: []string{"foobar"},
		},
		{
			name: "invalid JSON",
			body: `{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`,
			want: `{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}`,
		},
		{
			name: "invalid request object",
			body: `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`,
			want: `{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}`,
		},
		{
			name: "batch with invalid JSON",
			body: `[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]`,
			want: `{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}`,
		},
		{
			name: "empty array",
			body: `[]`,
			want: `{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}`,
		},
		{
			name: "invalid batch of one",
			body: `[1]`,
			want: `[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]`,
		},
		{
			name: "invalid batch",
			body: `[1,2,3]`,
			want: `[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]`,
		},
		{
			name: "mixed batch",
			body: `[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]`,
			want: `[
        {"jsonrpc": "2.0", "result": 7, "id": "1"},
        {"jsonrpc": "2.0", "result": 19, "id": "2"},
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
    ]`,
			dispatched: []string{"sum", "notify_hello", "subtract", "foo.get", "get_data"},
		},
		{
			name: "batch of notifications",
			body: `[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]`,
			dispatched: []string{"notify_sum", "notify_hello"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t)
			rec := serve(s.Handler(), post(tt.body))
			if tt.want == "" {
				if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
					t.Fatalf("POST %s = %d %q, want 204 with no body", tt.body, rec.Code, rec.Body)
				}
			} else {
				if rec.Code != http.StatusOK {
					t.Fatalf("POST %s = %d, want 200", tt.body, rec.Code)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", ct)
				}
				gotBatch, got := decode(t, rec.Body.Bytes())
				wantBatch, want := decode(t, []byte(tt.want))
				if gotBatch != wantBatch {
					t.Errorf("answer %s: array = %v, want %v", rec.Body, gotBatch, wantBatch)
				}
				if len(got) != len(want) {
					t.Fatalf("answer %s: %d responses, want %d", rec.Body, len(got), len(want))
				}
				for i := range want {
					if got[i].ID != want[i].ID || got[i].Result != want[i].Result || got[i].Code != want[i].Code {
						t.Errorf("response %d = id %s result %q code %d, want id %s result %q code %d",
							i, got[i].ID, got[i].Result, got[i].Code, want[i].ID, want[i].Result, want[i].Code)
					}
				}
			}
			if got := methods(f.dispatched()); !slices.Equal(got, tt.dispatched) {
				t.Errorf("dispatched %q, want %q", got, tt.dispatched)
			}
			if n := f.dispatches(); n > 1 {
				t.Errorf("Dispatch called %d times, want at most once", n)
			}
		})
	}
}
