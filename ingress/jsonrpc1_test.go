package ingress

import (
	"net/http"
	"testing"
)

func TestJSONRPC1(t *testing.T) {
	tests := []struct {
		name string
		on   bool
		body string
		want string // exact answer; empty means 204
	}{
		{name: "off: no jsonrpc member is invalid", body: `{"method":"echo","params":[1],"id":1}`,
			want: `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\", and this request has none, as a JSON-RPC 1.0 request would; the ingress serves 1.0 only when started with --jsonrpc1"},"id":1}`},
		{name: "off: null id is a request", body: `{"method":"echo","params":[1],"id":null}`,
			want: `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\", and this request has none, as a JSON-RPC 1.0 request would; the ingress serves 1.0 only when started with --jsonrpc1"},"id":null}`},
		{name: "result", on: true, body: `{"method":"echo","params":[1],"id":1}`,
			want: `{"result":[1],"error":null,"id":1}`},
		{name: "string id", on: true, body: `{"method":"echo","params":{"a":"b"},"id":"x"}`,
			want: `{"result":{"a":"b"},"error":null,"id":"x"}`},
		{name: "no params", on: true, body: `{"method":"echo","id":1}`,
			want: `{"result":null,"error":null,"id":1}`},
		{name: "null params", on: true, body: `{"method":"echo","params":null,"id":1}`,
			want: `{"result":null,"error":null,"id":1}`},
		{name: "error", on: true, body: `{"method":"fail","params":[],"id":2}`,
			want: `{"result":null,"error":{"code":2001,"message":"business rule","data":{"why":"closed"}},"id":2}`},
		{name: "null id is a notification", on: true, body: `{"method":"echo","params":[1],"id":null}`},
		{name: "no id is invalid", on: true, body: `{"method":"echo","params":[1]}`,
			want: `{"result":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC 1.0 request needs an \"id\" (null for a notification)"},"id":null}`},
		{name: "method not a string", on: true, body: `{"method":1,"id":3}`,
			want: `{"result":null,"error":{"code":-32600,"message":"invalid request: \"method\" must be a string"},"id":3}`},
		{name: "scalar params", on: true, body: `{"method":"echo","params":1,"id":3}`,
			want: `{"result":null,"error":{"code":-32600,"message":"invalid request: \"params\" must be an array or an object"},"id":3}`},
		{name: "reserved method", on: true, body: `{"method":"rpc.x","id":4}`,
			want: `{"result":null,"error":{"code":-32601,"message":"method not found: rpc.x is reserved","data":{"method":"rpc.x","reason":"reserved"}},"id":4}`},
		{name: "other version stays 2.0 and invalid", on: true, body: `{"jsonrpc":"1.0","method":"echo","id":5}`,
			want: `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""},"id":5}`},
		{name: "2.0 unchanged", on: true, body: `{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}`,
			want: `{"jsonrpc":"2.0","result":[1],"id":1}`},
		{name: "mixed batch", on: true,
			body: `[{"method":"echo","params":[1],"id":1},{"jsonrpc":"2.0","method":"echo","params":[2],"id":2},{"method":"echo","params":[3],"id":null},{"foo":1},[1]]`,
			want: `[{"result":[1],"error":null,"id":1},{"jsonrpc":"2.0","result":[2],"id":2},` +
				`{"result":null,"error":{"code":-32600,"message":"invalid request: a JSON-RPC 1.0 request needs an \"id\" (null for a notification)"},"id":null},` +
				`{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request: not an object"},"id":null}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t, WithJSONRPC1(tt.on))
			rec := serve(s.Handler(), post(tt.body))
			if tt.want == "" {
				if rec.Code != http.StatusNoContent {
					t.Errorf("POST %s = %d %s, want 204", tt.body, rec.Code, rec.Body)
				}
				if n := len(f.dispatched()); n != 1 {
					t.Errorf("dispatched %d calls, want the notification", n)
				}
				return
			}
			if rec.Code != http.StatusOK || rec.Body.String() != tt.want {
				t.Errorf("POST %s = %d\n%s\nwant 200\n%s", tt.body, rec.Code, rec.Body, tt.want)
			}
		})
	}
}

// TestJSONRPC1Transports checks that 1.0 answers keep their form over the
// streaming transports.
func TestJSONRPC1Transports(t *testing.T) {
	s, _ := newServer(t, WithJSONRPC1(true))
	c := dialWS(t, s)
	send(t, c, `{"method":"echo","params":[1],"id":1}`)
	ctx := t.Context()
	_, b, err := c.Read(ctx)
	if err != nil || string(b) != `{"result":[1],"error":null,"id":1}` {
		t.Errorf("WebSocket answer %s, %v, want the 1.0 form", b, err)
	}
	rec := serve(s.Handler(), post(`{"method":"echo","params":[1],"id":1}`, "Accept", EventStream))
	if want := "data: {\"result\":[1],\"error\":null,\"id\":1}\n\nevent: done\ndata: {\"answers\":1}\n\n"; rec.Body.String() != want {
		t.Errorf("SSE answer %q, want %q", rec.Body, want)
	}
}
