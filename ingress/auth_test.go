package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolbus/toolbus/schema"
)

const (
	testIssuer   = "https://issuer.toolbus.test"
	testAudience = "toolbus"
)

var testSecret = []byte("a test secret of thirty-two bytes")

// testKeys are the signing keys of the JWKS the tests write.
type testKeys struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	path string
}

func newTestKeys(t *testing.T) testKeys {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := ek.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64(rk.N.Bytes()), "e": b64(big.NewInt(int64(rk.E)).Bytes())},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(point[1:33]), "y": b64(point[33:])},
	}}
	b, _ := json.Marshal(set)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return testKeys{rsa: rk, ec: ek, path: path}
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(sub string, exp time.Duration, edit ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(exp).Unix()}
	for _, e := range edit {
		e(c)
	}
	return c
}

func testAuth(keys testKeys) Auth {
	return Auth{
		Keys: []APIKey{
			{Name: "alice", SHA256: HashAPIKey("alice-key"), Allow: []string{"echo", "math.*"}},
			{Name: "bob", SHA256: HashAPIKey("bob-key")},
		},
		JWT:          &JWTConfig{Secret: testSecret, JWKSFile: keys.path, Issuer: testIssuer, Audience: testAudience},
		Allow:        map[string][]string{"carol": {">"}},
		DefaultAllow: []string{"echo"},
	}
}

func TestAuthenticate(t *testing.T) {
	keys := newTestKeys(t)
	s, f := newServer(t, WithAuth(testAuth(keys)))
	h := s.Handler()
	const body = `{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}`
	tests := []struct {
		name       string
		header     []string
		wantStatus int
		wantCaller string
	}{
		{name: "no credentials", wantStatus: http.StatusUnauthorized},
		{name: "unknown key", header: []string{"Authorization", "Bearer nope"}, wantStatus: http.StatusUnauthorized},
		{name: "basic scheme", header: []string{"Authorization", "Basic YWxpY2U6eA=="}, wantStatus: http.StatusUnauthorized},
		{name: "bearer key", header: []string{"Authorization", "Bearer alice-key"}, wantStatus: http.StatusOK, wantCaller: "alice"},
		{name: "x-api-key", header: []string{"X-Api-Key", "bob-key"}, wantStatus: http.StatusOK, wantCaller: "bob"},
		{name: "hs256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", time.Minute))},
			wantStatus: http.StatusOK, wantCaller: "carol"},
		{name: "rs256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, "r1", keys.rsa, claims("dave", time.Minute))},
			wantStatus: http.StatusOK, wantCaller: "dave"},
		{name: "es256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodES256, "e1", keys.ec, claims("erin", time.Minute))},
			wantStatus: http.StatusOK, wantCaller: "erin"},
		{name: "expired within leeway", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", -5*time.Second))},
			wantStatus: http.StatusOK, wantCaller: "carol"},
		{name: "expired", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", -time.Hour))},
			wantStatus: http.StatusUnauthorized},
		{name: "no exp", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", 0, func(c jwt.MapClaims) { delete(c, "exp") }))}, wantStatus: http.StatusUnauthorized},
		{name: "wrong issuer", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", time.Minute, func(c jwt.MapClaims) { c["iss"] = "https://other" }))}, wantStatus: http.StatusUnauthorized},
		{name: "wrong audience", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", time.Minute, func(c jwt.MapClaims) { c["aud"] = "other" }))}, wantStatus: http.StatusUnauthorized},
		{name: "wrong secret", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", []byte("another secret, also long enough"), claims("carol", time.Minute))},
			wantStatus: http.StatusUnauthorized},
		{name: "unknown kid", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, "r9", keys.rsa, claims("dave", time.Minute))},
			wantStatus: http.StatusUnauthorized},
		{name: "alg none", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodNone, "", jwt.UnsafeAllowNoneSignatureType, claims("carol", time.Minute))},
			wantStatus: http.StatusUnauthorized},
		{name: "no subject", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("", time.Minute))}, wantStatus: http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.dispatched())
			rec := serve(h, post(body, tc.header...))
			if rec.Code != tc.wantStatus {
				t.Fatalf("POST /rpc = HTTP %d %s, want %d", rec.Code, rec.Body, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusUnauthorized {
				if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
				}
				if a := decodeOne(t, rec.Body.Bytes()); a.Code != schema.CodeForbidden {
					t.Errorf("401 body code = %d, want %d", a.Code, schema.CodeForbidden)
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
	s, f := newServer(t, WithAuth(Auth{Keys: []APIKey{{Name: "alice", SHA256: HashAPIKey("k"), Allow: []string{">"}}}}))
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
	tests := []struct {
		name string
		auth Auth
	}{
		{name: "nothing to accept", auth: Auth{}},
		{name: "key without name", auth: Auth{Keys: []APIKey{{SHA256: HashAPIKey("k")}}}},
		{name: "digest not hex", auth: Auth{Keys: []APIKey{{Name: "a", SHA256: "k"}}}},
		{name: "bad pattern", auth: Auth{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k"), Allow: []string{"math.>.x"}}}}},
		{name: "jwt without issuer", auth: Auth{JWT: &JWTConfig{Secret: testSecret, Audience: "a"}}},
		{name: "jwt without keys", auth: Auth{JWT: &JWTConfig{Issuer: "i", Audience: "a"}}},
		{name: "jwks missing", auth: Auth{JWT: &JWTConfig{JWKSFile: filepath.Join(t.TempDir(), "none.json"), Issuer: "i", Audience: "a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(newFake(), WithAuth(tc.auth)); err == nil {
				t.Errorf("New(WithAuth(%+v)) error = nil, want an error", tc.auth)
			}
		})
	}
}

func TestAuthenticateErrors(t *testing.T) {
	au, err := newAuthenticator(Auth{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k")}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header string
		want   error
	}{
		{name: "none", want: ErrNoCredentials},
		{name: "bad key", header: "Bearer x", want: ErrBadCredentials},
		{name: "empty bearer", header: "Bearer ", want: ErrBadCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := post("{}")
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if _, err := au.authenticate(r); !errors.Is(err, tc.want) {
				t.Errorf("authenticate(%q) = %v, want %v", tc.header, err, tc.want)
			}
		})
	}
}

func TestOperatorRole(t *testing.T) {
	jwtConf := func(role string) *JWTConfig {
		return &JWTConfig{Secret: testSecret, Issuer: testIssuer, Audience: testAudience, OperatorRole: role}
	}
	token := func(roles any) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", time.Minute, func(c jwt.MapClaims) {
			if roles != nil {
				c["roles"] = roles
			}
		}))
	}
	keys := []APIKey{
		{Name: "ops", SHA256: HashAPIKey("ops-key"), Operator: true},
		{Name: "alice", SHA256: HashAPIKey("alice-key")},
	}
	tests := []struct {
		name   string
		jwt    *JWTConfig
		header string
		want   bool
	}{
		{name: "operator key", header: "Bearer ops-key", want: true},
		{name: "other key", header: "Bearer alice-key"},
		{name: "role in an array", jwt: jwtConf("toolbus-operator"), header: token([]string{"reader", "toolbus-operator"}), want: true},
		{name: "role in a string", jwt: jwtConf("toolbus-operator"), header: token("reader toolbus-operator"), want: true},
		{name: "other roles", jwt: jwtConf("toolbus-operator"), header: token([]string{"reader"})},
		{name: "a role spelled within another", jwt: jwtConf("op"), header: token("operator")},
		{name: "no roles", jwt: jwtConf("toolbus-operator"), header: token(nil)},
		{name: "no operator role configured", jwt: jwtConf(""), header: token([]string{""})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			au, err := newAuthenticator(Auth{Keys: keys, JWT: tc.jwt})
			if err != nil {
				t.Fatal(err)
			}
			r := post("{}")
			r.Header.Set("Authorization", tc.header)
			p, err := au.authenticate(r)
			if err != nil {
				t.Fatalf("authenticate() error = %v", err)
			}
			if p.operator != tc.want {
				t.Errorf("authenticate(%s).operator = %v, want %v", tc.name, p.operator, tc.want)
			}
		})
	}
}
