package ingress

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// TestAuthMiddleware checks the answer to a request the authenticator
// refuses (package auth tests which it refuses), and that an accepted
// caller goes with its calls.
func TestAuthMiddleware(t *testing.T) {
	s, f := newServer(t, WithAuth(auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"echo"}},
		{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"echo"}},
	}}))
	h := s.Handler()
	const body = `{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}`
	tests := []struct {
		name          string
		header        []string
		wantStatus    int
		wantChallenge string
		wantReason    string
		wantCaller    string
	}{
		{name: "no credentials", wantStatus: http.StatusUnauthorized,
			wantChallenge: `Bearer realm="toolbus"`, wantReason: schema.ReasonUnauthenticated},
		{name: "unknown key", header: []string{"Authorization", "Bearer nope"}, wantStatus: http.StatusUnauthorized,
			wantChallenge: `Bearer realm="toolbus", error="invalid_token"`, wantReason: schema.ReasonInvalidCredentials},
		{name: "bearer key", header: []string{"Authorization", "Bearer alice-key"}, wantStatus: http.StatusOK, wantCaller: "alice"},
		{name: "x-api-key", header: []string{auth.APIKeyHeader, "bob-key"}, wantStatus: http.StatusOK, wantCaller: "bob"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.dispatched())
			rec := serve(h, post(body, tc.header...))
			if rec.Code != tc.wantStatus {
				t.Fatalf("POST /rpc = HTTP %d %s, want %d", rec.Code, rec.Body, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusUnauthorized {
				if got := rec.Header().Get("WWW-Authenticate"); got != tc.wantChallenge {
					t.Errorf("WWW-Authenticate = %q, want %q", got, tc.wantChallenge)
				}
				if a := decodeOne(t, rec.Body.Bytes()); a.Code != schema.CodeForbidden || a.Data["reason"] != tc.wantReason {
					t.Errorf("401 body = code %d reason %v, want %d %q", a.Code, a.Data["reason"], schema.CodeForbidden, tc.wantReason)
				}
				if got := len(f.dispatched()); got != before {
					t.Errorf("dispatched %d calls after a 401, want none", got-before)
				}
				return
			}
			calls := f.dispatched()
			if got := calls[len(calls)-1].Caller; got != tc.wantCaller {
				t.Errorf("call caller = %q, want %q", got, tc.wantCaller)
			}
		})
	}
}

// TestAuthenticateEveryRoute checks that every transport is behind the
// middleware and the probes are not.
func TestAuthenticateEveryRoute(t *testing.T) {
	s, f := newServer(t, WithAuth(auth.Config{Keys: []auth.APIKey{{Name: "alice", SHA256: auth.HashAPIKey("k"), Allow: []string{">"}}}}))
	h := s.Handler()
	ws := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/rpc", nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		return r
	}
	sse := func() *http.Request {
		r := post(`{"jsonrpc":"2.0","id":1,"method":"echo"}`)
		r.Header.Set("Accept", "text/event-stream")
		return r
	}
	rest := func() *http.Request {
		return httptest.NewRequest(http.MethodPost, "/v1/tools/echo/invoke", strings.NewReader(`{}`))
	}
	tests := []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{name: "websocket upgrade", req: ws, want: http.StatusUnauthorized},
		{name: "sse", req: sse, want: http.StatusUnauthorized},
		{name: "rest", req: rest, want: http.StatusUnauthorized},
		{name: "unknown path", req: func() *http.Request { return httptest.NewRequest(http.MethodGet, "/nothing", nil) }, want: http.StatusUnauthorized},
		{name: "healthz", req: func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) }, want: http.StatusOK},
		{name: "readyz", req: func() *http.Request { return httptest.NewRequest(http.MethodGet, "/readyz", nil) }, want: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := serve(h, tc.req()).Code; got != tc.want {
				t.Errorf("%s = HTTP %d, want %d", tc.name, got, tc.want)
			}
		})
	}
	if n := f.dispatches(); n != 0 {
		t.Errorf("dispatches = %d, want 0", n)
	}
}

func TestWithAuthInvalid(t *testing.T) {
	if _, err := New(newFake(), WithAuth(auth.Config{})); err == nil {
		t.Error("New(WithAuth(auth.Config{})) error = nil, want an error")
	}
}
