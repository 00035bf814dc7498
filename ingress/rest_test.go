package ingress

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// restAnswer is the body of a REST answer.
type restAnswer struct {
	Success   bool            `json:"success"`
	Data      json.RawMessage `json:"data"`
	Error     *schema.Error   `json:"error"`
	RequestID string          `json:"request_id"`
}

func invoke(t *testing.T, h http.Handler, method, path, body string, headers ...string) (*httptest.ResponseRecorder, restAnswer) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	rec := serve(h, r)
	var a restAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("%s %s answer %q: %v", method, path, rec.Body, err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if a.RequestID == "" || rec.Header().Get(RequestIDHeader) != a.RequestID {
		t.Errorf("request_id %q, header %q: want the same, not empty", a.RequestID, rec.Header().Get(RequestIDHeader))
	}
	return rec, a
}

func TestREST(t *testing.T) {
	small := Limits{MaxBodyBytes: 100, MaxDepth: 3}
	tests := []struct {
		name       string
		method     string // HTTP method; POST when empty
		tool       string
		body       string
		headers    []string
		wantStatus int
		wantData   string // for a success
		wantCode   int    // for a failure
		retryAfter string
	}{
		{name: "object params", tool: "echo", body: `{"a":1}`, wantStatus: 200, wantData: `{"a":1}`},
		{name: "array params", tool: "subtract", body: `[42,23]`, wantStatus: 200, wantData: `19`},
		{name: "no params", tool: "echo", wantStatus: 200, wantData: `null`},
		{name: "json content type", tool: "echo", body: `[1]`, headers: []string{"Content-Type", "application/json; charset=utf-8"}, wantStatus: 200, wantData: `[1]`},
		{name: "tool error", tool: "fail", wantStatus: 422, wantCode: 2001},
		{name: "generic tool error", tool: "error", body: `{"code":-32000}`, wantStatus: 422, wantCode: -32000},
		{name: "unknown method", tool: "nope", wantStatus: 404, wantCode: schema.CodeMethodNotFound},
		{name: "invalid method name", tool: "a..b", wantStatus: 404, wantCode: schema.CodeMethodNotFound},
		{name: "reserved method", tool: "rpc.cancel", wantStatus: 404, wantCode: schema.CodeMethodNotFound},
		{name: "invalid params", tool: "subtract", body: `[1]`, wantStatus: 400, wantCode: schema.CodeInvalidParams},
		{name: "scalar body", tool: "echo", body: `1`, wantStatus: 400, wantCode: schema.CodeInvalidParams},
		{name: "invalid JSON", tool: "echo", body: `{`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "invalid scalar", tool: "echo", body: `1x`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "two values", tool: "echo", body: `{} {}`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "members after the params", tool: "echo", body: `{"a":1},"method":"fail"`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "params again", tool: "echo", body: `{"a":1},"params":{"b":2}`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "invalid UTF-8", tool: "echo", body: "[\"\xff\"]", wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "too deep and not JSON", tool: "echo", body: `[[[[1`, wantStatus: 400, wantCode: schema.CodeParseError},
		{name: "timed out", tool: "error", body: `{"code":-32001}`, wantStatus: 504, wantCode: schema.CodeTimeout},
		{name: "unavailable", tool: "error", body: `{"code":-32003,"data":{"retryable":true}}`, wantStatus: 503, wantCode: schema.CodeUnavailable},
		{name: "overloaded", tool: "error", body: `{"code":-32002,"data":{"retry_after_ms":1500}}`, wantStatus: 429, wantCode: schema.CodeOverloaded, retryAfter: "2"},
		{name: "overloaded briefly", tool: "error", body: `{"code":-32002,"data":{"retry_after_ms":100}}`, wantStatus: 429, wantCode: schema.CodeOverloaded, retryAfter: "1"},
		{name: "forbidden", tool: "error", body: `{"code":-32005}`, wantStatus: 403, wantCode: schema.CodeForbidden},
		{name: "canceled", tool: "error", body: `{"code":-32004}`, wantStatus: 499, wantCode: schema.CodeCanceled},
		{name: "internal", tool: "error", body: `{"code":-32603}`, wantStatus: 500, wantCode: schema.CodeInternal},
		{name: "limit from the tool", tool: "error", body: `{"code":-32006}`, wantStatus: 413, wantCode: schema.CodeLimitExceeded},
		{name: "neither result nor error", tool: "bad.empty", wantStatus: 500, wantCode: schema.CodeInternal},
		{name: "body over limit", tool: "echo", body: `["` + strings.Repeat("x", 100) + `"]`, wantStatus: 413, wantCode: schema.CodeLimitExceeded},
		{name: "too deep", tool: "echo", body: `[[[1]]]`, wantStatus: 413, wantCode: schema.CodeLimitExceeded},
		{name: "depth at limit", tool: "echo", body: `[[1]]`, wantStatus: 200, wantData: `[[1]]`},
		{name: "GET", method: "GET", tool: "echo", wantStatus: 405, wantCode: schema.CodeInvalidRequest},
		{name: "text body", tool: "echo", body: `[1]`, headers: []string{"Content-Type", "text/plain"}, wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "bad timeout header", tool: "echo", headers: []string{schema.HeaderTimeout, "soon"}, wantStatus: 400, wantCode: schema.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newServer(t, WithLimits(small))
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			rec, a := invoke(t, s.Handler(), method, "/v1/tools/"+tt.tool+"/invoke", tt.body, tt.headers...)
			if rec.Code != tt.wantStatus {
				t.Fatalf("%s %s = %d %s, want %d", method, tt.tool, rec.Code, rec.Body, tt.wantStatus)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if tt.wantStatus == http.StatusOK {
				if !a.Success || string(a.Data) != tt.wantData || a.Error != nil {
					t.Errorf("answer %s, want success with data %s", rec.Body, tt.wantData)
				}
				return
			}
			if a.Success || a.Error == nil || a.Error.Code != tt.wantCode || a.Data != nil {
				t.Errorf("answer %s, want failure with code %d", rec.Body, tt.wantCode)
			}
		})
	}
}

func TestRESTRequestID(t *testing.T) {
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tests := []struct {
		name, header string
		want         string // "" means a generated one
	}{
		{name: "absent"},
		{name: "sane", header: "req-42_a.b:c", want: "req-42_a.b:c"},
		{name: "space", header: "a b"},
		{name: "quote", header: `a"b`},
		{name: "too long", header: strings.Repeat("a", 129)},
		{name: "longest", header: strings.Repeat("a", 128), want: strings.Repeat("a", 128)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t)
			var h []string
			if tt.header != "" {
				h = []string{RequestIDHeader, tt.header}
			}
			_, a := invoke(t, s.Handler(), http.MethodPost, "/v1/tools/echo/invoke", "", h...)
			if tt.want != "" && a.RequestID != tt.want || tt.want == "" && !generated.MatchString(a.RequestID) {
				t.Errorf("request_id = %q, want %q (or a generated one when empty)", a.RequestID, tt.want)
			}
			id, _ := json.Marshal(a.RequestID)
			if calls := f.dispatched(); len(calls) != 1 || string(calls[0].ID) != string(id) {
				t.Errorf("dispatched %+v, want one call with id %s", calls, id)
			}
		})
	}
}

func TestRESTCall(t *testing.T) {
	s, f := newServer(t)
	_, a := invoke(t, s.Handler(), http.MethodPost, "/v1/tools/fs%2Fread/invoke", `{"p":1}`, schema.HeaderTimeout, "2s")
	if a.Error == nil || a.Error.Code != schema.CodeMethodNotFound {
		t.Errorf("answer %+v, want the fake's -32601 for fs/read", a)
	}
	calls := f.dispatched()
	if len(calls) != 1 || calls[0].Method != "fs/read" || string(calls[0].Params) != `{"p":1}` || calls[0].Timeout != 2*time.Second {
		t.Errorf("dispatched %+v, want fs/read with the body as params and a 2s timeout", calls)
	}
}
