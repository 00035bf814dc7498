package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPlainEcho(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		body       string
		wantStatus int
		wantBody   string
	}{
		{"number id", "POST", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`, 200,
			`{"jsonrpc":"2.0","result":{"a":1},"id":1}`},
		{"string id stays a string", "POST", `{"jsonrpc":"2.0","id":"101","method":"echo","params":[1,2]}`, 200,
			`{"jsonrpc":"2.0","result":[1,2],"id":"101"}`},
		{"big id keeps its digits", "POST", `{"jsonrpc":"2.0","id":12345678901234567890,"method":"echo","params":{}}`, 200,
			`{"jsonrpc":"2.0","result":{},"id":12345678901234567890}`},
		{"float id keeps its spelling", "POST", `{"jsonrpc":"2.0","id":-1.50e+3,"method":"echo","params":{}}`, 200,
			`{"jsonrpc":"2.0","result":{},"id":-1.50e+3}`},
		{"html in id is not escaped", "POST", `{"jsonrpc":"2.0","id":"<a&b>","method":"echo","params":{}}`, 200,
			`{"jsonrpc":"2.0","result":{},"id":"<a&b>"}`},
		{"escaped id stays escaped", "POST", `{"jsonrpc":"2.0","id":"caf\u00e9","method":"echo","params":{}}`, 200,
			`{"jsonrpc":"2.0","result":{},"id":"caf\u00e9"}`},
		{"null id", "POST", `{"jsonrpc":"2.0","id":null,"method":"echo","params":{"x":"y"}}`, 200,
			`{"jsonrpc":"2.0","result":{"x":"y"},"id":null}`},
		{"no params", "POST", `{"jsonrpc":"2.0","id":7,"method":"echo"}`, 200,
			`{"jsonrpc":"2.0","result":null,"id":7}`},
		{"unknown method", "POST", `{"jsonrpc":"2.0","id":2,"method":"nope"}`, 200,
			`{"jsonrpc":"2.0","error":{"code":-32601,"message":"method not found"},"id":2}`},
		{"wrong version", "POST", `{"jsonrpc":"1.0","id":3,"method":"echo"}`, 200,
			`{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request"},"id":3}`},
		{"invalid JSON", "POST", `{"jsonrpc":`, 200,
			`{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"},"id":null}`},
		{"notification", "POST", `{"jsonrpc":"2.0","method":"echo","params":{}}`, 204, ``},
		{"GET", "GET", ``, 405, "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			PlainEcho().ServeHTTP(rec, httptest.NewRequest(tt.method, "/rpc", strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := strings.TrimSuffix(rec.Body.String(), "\n"); got != tt.wantBody {
				t.Errorf("body = %s, want %s", got, tt.wantBody)
			}
			if tt.wantStatus == http.StatusOK {
				if got := rec.Header().Get("Content-Type"); got != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", got)
				}
			}
		})
	}
}
