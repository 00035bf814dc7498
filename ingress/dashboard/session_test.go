package dashboard

import (
	"crypto/tls"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/callstats"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// keyCookie is the cookie a browser sends back after a sign-in with key.
func keyCookie(key string) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: base64.RawURLEncoding.EncodeToString([]byte(key))}
}

// keptCookie returns the dashboard's cookie resp sets, or nil.
func keptCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			return c
		}
	}
	return nil
}

// clearsCookie reports whether resp makes the browser drop the cookie.
func clearsCookie(resp *http.Response) bool {
	c := keptCookie(resp)
	return c != nil && c.MaxAge < 0
}

func TestSignIn(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		ctype   string
		header  map[string]string
		tls     bool
		status  int
		kept    bool
		secure  bool
		headers bool // credentials in headers reached Access.View
	}{
		{name: "accepted key", body: `{"key":"good"}`, status: http.StatusOK, kept: true},
		{name: "accepted key over TLS", body: `{"key":"good"}`, tls: true, status: http.StatusOK, kept: true, secure: true},
		{name: "accepted key behind a TLS proxy", body: `{"key":"good"}`, header: map[string]string{"X-Forwarded-Proto": "https"},
			status: http.StatusOK, kept: true, secure: true},
		{name: "refused key", body: `{"key":"bad"}`, status: http.StatusUnauthorized},
		{name: "empty key", body: `{"key":"  "}`, status: http.StatusBadRequest},
		{name: "long key", body: `{"key":"` + strings.Repeat("k", maxKeyBytes+1) + `"}`, status: http.StatusBadRequest},
		{name: "not JSON", body: `key=good`, ctype: "application/x-www-form-urlencoded", status: http.StatusUnsupportedMediaType},
		{name: "another site", body: `{"key":"good"}`, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, status: http.StatusForbidden},
		{name: "another origin", body: `{"key":"good"}`, header: map[string]string{"Origin": "https://evil.example"}, status: http.StatusForbidden},
		{name: "header credentials do not speak for the key", body: `{"key":"bad"}`,
			header: map[string]string{"Authorization": "Bearer good"}, status: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			access := &fakeAccess{}
			h := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 }}).Handler(access, discardLog)
			r := httptest.NewRequest(http.MethodPost, "http://ingress.test"+SessionPath, strings.NewReader(tt.body))
			ctype := tt.ctype
			if ctype == "" {
				ctype = "application/json"
			}
			r.Header.Set("Content-Type", ctype)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tt.status {
				t.Fatalf("POST %s = %d %s, want %d", SessionPath, rec.Code, rec.Body, tt.status)
			}
			if access.headers != tt.headers {
				t.Errorf("View saw header credentials %v, want %v", access.headers, tt.headers)
			}
			c := keptCookie(rec.Result())
			if (c != nil) != tt.kept {
				t.Fatalf("cookie set = %v (%v), want %v", c != nil, c, tt.kept)
			}
			if c == nil {
				return
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.MaxAge != 0 || !c.Expires.IsZero() || c.Secure != tt.secure {
				t.Errorf("cookie = %+v, want HttpOnly, SameSite=Strict, Path=/ui/, a session cookie, Secure %v", c, tt.secure)
			}
			if got, _ := base64.RawURLEncoding.DecodeString(c.Value); string(got) != "good" {
				t.Errorf("cookie holds %q, want the key", got)
			}
			if !strings.Contains(rec.Body.String(), `"caller":"bob"`) {
				t.Errorf("sign-in answered %s, want bob's state", rec.Body)
			}
		})
	}
}

func TestSignOut(t *testing.T) {
	h := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 }}).Handler(&fakeAccess{}, discardLog)
	tests := []struct {
		name    string
		site    string
		status  int
		cleared bool
	}{
		{name: "the page's own", site: "same-origin", status: http.StatusNoContent, cleared: true},
		{name: "another site", site: "cross-site", status: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodDelete, SessionPath, nil)
			r.Header.Set("Sec-Fetch-Site", tt.site)
			r.AddCookie(keyCookie("good"))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tt.status || clearsCookie(rec.Result()) != tt.cleared {
				t.Errorf("DELETE %s = %d, cookie cleared %v; want %d, %v", SessionPath, rec.Code, clearsCookie(rec.Result()), tt.status, tt.cleared)
			}
		})
	}
}

// TestStateByCookie checks that the data route reads the cookie's key,
// and drops a cookie whose key is refused.
func TestStateByCookie(t *testing.T) {
	h := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 }}).Handler(&fakeAccess{}, discardLog)
	tests := []struct {
		name    string
		key     string
		status  int
		cleared bool
	}{
		{name: "accepted", key: "good", status: http.StatusOK},
		{name: "refused", key: "bad", status: http.StatusUnauthorized, cleared: true},
		{name: "none", status: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
			if tt.key != "" {
				r.AddCookie(keyCookie(tt.key))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tt.status || clearsCookie(rec.Result()) != tt.cleared {
				t.Errorf("GET /ui/api/state = %d, cookie cleared %v; want %d, %v", rec.Code, clearsCookie(rec.Result()), tt.status, tt.cleared)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		name string
		path string
		want bool
	}{
		{"page", "/ui/", true},
		{"redirect", "/ui", true},
		{"data", "/ui/api/state", true},
		{"session", SessionPath, true},
		{"rpc", "/rpc", false},
		{"lookalike", "/uix", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Open(tt.path); got != tt.want {
				t.Errorf("Open(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}
