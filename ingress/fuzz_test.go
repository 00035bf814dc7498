package ingress

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

// FuzzServeRPC sends arbitrary bodies and headers to POST /rpc over the
// fake dispatcher: whatever comes in, the handler returns, answers with a
// status from the HTTP rules, and a 200 carries valid JSON-RPC.
func FuzzServeRPC(f *testing.F) {
	for _, seed := range []struct{ body, contentType, timeout string }{
		{`{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}`, "application/json", ""},
		{`[{"jsonrpc":"2.0","id":"a","method":"sum","params":[1,2]},{"jsonrpc":"2.0","method":"notify_hello"}]`, "application/json; charset=utf-8", "300ms"},
		{`[]`, "application/json", ""},
		{`[1,2,3]`, "application/json", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"$JS.API.STREAM.LIST"}`, "application/json", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a.*"}`, "application/json", "-1s"},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":[\"\xff\"]}", "application/json", ""},
		{`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`, "application/json", ""},
		{`not json`, "text/plain", ""},
	} {
		f.Add(seed.body, seed.contentType, seed.timeout)
	}
	s, _ := newServer(f, WithLimits(Limits{MaxBodyBytes: 1 << 16, MaxBatchItems: 50}))
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body, contentType, timeout string) {
		r := httptest.NewRequest(http.MethodPost, "/rpc", strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		if timeout != "" {
			r.Header.Set(schema.HeaderTimeout, timeout)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		switch rec.Code {
		case http.StatusOK:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("200 with a body that is not JSON: %q", rec.Body.Bytes())
			}
		case http.StatusNoContent:
			if rec.Body.Len() != 0 {
				t.Fatalf("204 with a body: %q", rec.Body.Bytes())
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%d with a body that is not JSON: %q", rec.Code, rec.Body.Bytes())
			}
		default:
			t.Fatalf("status %d for body %q", rec.Code, body)
		}
	})
}
