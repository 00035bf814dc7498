package auth

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
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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

func testConfig(keys testKeys) Config {
	return Config{
		Keys: []APIKey{
			{Name: "alice", SHA256: HashAPIKey("alice-key"), Allow: []string{"echo", "math.*"}},
			{Name: "bob", SHA256: HashAPIKey("bob-key")},
		},
		JWT:          &JWT{Secret: testSecret, JWKSFile: keys.path, Issuer: testIssuer, Audience: testAudience},
		Allow:        map[string][]string{"carol": {">"}},
		DefaultAllow: []string{"echo"},
	}
}

// request returns a request with the header pairs kv.
func request(kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/rpc", nil)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Set(kv[i], kv[i+1])
	}
	return r
}

func TestAuthenticate(t *testing.T) {
	keys := newTestKeys(t)
	au, err := New(testConfig(keys))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		header     []string
		wantCaller string
		wantErr    error
	}{
		{name: "no credentials", wantErr: ErrNoCredentials},
		{name: "unknown key", header: []string{"Authorization", "Bearer nope"}, wantErr: ErrBadCredentials},
		{name: "basic scheme", header: []string{"Authorization", "Basic YWxpY2U6eA=="}, wantErr: ErrBadCredentials},
		{name: "bearer key", header: []string{"Authorization", "Bearer alice-key"}, wantCaller: "alice"},
		{name: "x-api-key", header: []string{"X-Api-Key", "bob-key"}, wantCaller: "bob"},
		{name: "hs256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", time.Minute))},
			wantCaller: "carol"},
		{name: "rs256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, "r1", keys.rsa, claims("dave", time.Minute))},
			wantCaller: "dave"},
		{name: "es256", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodES256, "e1", keys.ec, claims("erin", time.Minute))},
			wantCaller: "erin"},
		{name: "expired within leeway", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", -5*time.Second))},
			wantCaller: "carol"},
		{name: "expired", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", -time.Hour))},
			wantErr: ErrBadCredentials},
		{name: "no exp", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", 0, func(c jwt.MapClaims) { delete(c, "exp") }))}, wantErr: ErrBadCredentials},
		{name: "wrong issuer", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", time.Minute, func(c jwt.MapClaims) { c["iss"] = "https://other" }))}, wantErr: ErrBadCredentials},
		{name: "wrong audience", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("carol", time.Minute, func(c jwt.MapClaims) { c["aud"] = "other" }))}, wantErr: ErrBadCredentials},
		{name: "wrong secret", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", []byte("another secret, also long enough"), claims("carol", time.Minute))},
			wantErr: ErrBadCredentials},
		{name: "unknown kid", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodRS256, "r9", keys.rsa, claims("dave", time.Minute))},
			wantErr: ErrBadCredentials},
		{name: "alg none", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodNone, "", jwt.UnsafeAllowNoneSignatureType, claims("carol", time.Minute))},
			wantErr: ErrBadCredentials},
		{name: "no subject", header: []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret,
			claims("", time.Minute))}, wantErr: ErrBadCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := au.Authenticate(request(tc.header...))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Authenticate() = %v, %v, want %v", p, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate() error = %v", err)
			}
			if p.Name != tc.wantCaller {
				t.Errorf("Authenticate().Name = %q, want %q", p.Name, tc.wantCaller)
			}
		})
	}
}

// TestPrincipalAllow checks where a caller's patterns come from: its key,
// the Allow of its name, or DefaultAllow when it has neither.
func TestPrincipalAllow(t *testing.T) {
	au, err := New(Config{
		Keys: []APIKey{
			{Name: "alice", SHA256: HashAPIKey("alice-key"), Allow: []string{"echo"}},
			{Name: "bob", SHA256: HashAPIKey("bob-key")},
			{Name: "carol", SHA256: HashAPIKey("carol-key")},
		},
		Allow:        map[string][]string{"alice": {"math.*"}, "carol": {">"}},
		DefaultAllow: []string{"echo"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key       string
		wantAllow []string
		allows    []string
		refuses   []string
	}{
		{key: "alice-key", wantAllow: []string{"echo", "math.*"}, allows: []string{"echo", "math.add"}, refuses: []string{"math.vec.add", "admin"}},
		{key: "bob-key", wantAllow: []string{"echo"}, allows: []string{"echo"}, refuses: []string{"math.add"}},
		{key: "carol-key", wantAllow: []string{">"}, allows: []string{"echo", "math.vec.add"}},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			p, err := au.Authenticate(request(APIKeyHeader, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Allow, tc.wantAllow) {
				t.Errorf("Allow = %q, want %q", p.Allow, tc.wantAllow)
			}
			for _, m := range tc.allows {
				if !p.Allows(m) {
					t.Errorf("%s.Allows(%s) = false, want true", p, m)
				}
			}
			for _, m := range tc.refuses {
				if p.Allows(m) {
					t.Errorf("%s.Allows(%s) = true, want false", p, m)
				}
			}
		})
	}
}

func TestPrincipalString(t *testing.T) {
	var none *Principal
	if got := none.String(); got != "" {
		t.Errorf("(*Principal)(nil).String() = %q, want empty", got)
	}
	if got := (&Principal{Name: "bob"}).String(); got != "bob" {
		t.Errorf("String() = %q, want bob", got)
	}
}

func TestNewInvalid(t *testing.T) {
	tests := []struct {
		name string
		conf Config
	}{
		{name: "nothing to accept", conf: Config{}},
		{name: "key without name", conf: Config{Keys: []APIKey{{SHA256: HashAPIKey("k")}}}},
		{name: "digest not hex", conf: Config{Keys: []APIKey{{Name: "a", SHA256: "k"}}}},
		{name: "bad pattern", conf: Config{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k"), Allow: []string{"math.>.x"}}}}},
		{name: "jwt without issuer", conf: Config{JWT: &JWT{Secret: testSecret, Audience: "a"}}},
		{name: "jwt without keys", conf: Config{JWT: &JWT{Issuer: "i", Audience: "a"}}},
		{name: "jwks missing", conf: Config{JWT: &JWT{JWKSFile: filepath.Join(t.TempDir(), "none.json"), Issuer: "i", Audience: "a"}}},
		{name: "negative weight", conf: Config{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k"), Weight: -1}}}},
		{name: "weight past the most", conf: Config{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k"), Weight: MaxWeight + 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.conf); err == nil {
				t.Errorf("New(%+v) error = nil, want an error", tc.conf)
			}
		})
	}
}

func TestAuthenticateErrors(t *testing.T) {
	au, err := New(Config{Keys: []APIKey{{Name: "a", SHA256: HashAPIKey("k")}}})
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
			r := request()
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if _, err := au.Authenticate(r); !errors.Is(err, tc.want) {
				t.Errorf("Authenticate(%q) = %v, want %v", tc.header, err, tc.want)
			}
		})
	}
}

func TestOperatorRole(t *testing.T) {
	jwtConf := func(role string) *JWT {
		return &JWT{Secret: testSecret, Issuer: testIssuer, Audience: testAudience, OperatorRole: role}
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
		jwt    *JWT
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
			au, err := New(Config{Keys: keys, JWT: tc.jwt})
			if err != nil {
				t.Fatal(err)
			}
			r := request()
			r.Header.Set("Authorization", tc.header)
			p, err := au.Authenticate(r)
			if err != nil {
				t.Fatalf("Authenticate() error = %v", err)
			}
			if p.Operator != tc.want {
				t.Errorf("Authenticate(%s).Operator = %v, want %v", tc.name, p.Operator, tc.want)
			}
		})
	}
}

// TestWeightAndExempt: a caller's weight and exemption come from its key,
// or from its token's weight claim and roles.
func TestWeightAndExempt(t *testing.T) {
	jwtConf := &JWT{Secret: testSecret, Issuer: testIssuer, Audience: testAudience, ExemptRole: "health"}
	token := func(edit ...func(jwt.MapClaims)) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, "", testSecret, claims("carol", time.Minute, edit...))
	}
	au, err := New(Config{JWT: jwtConf, Keys: []APIKey{
		{Name: "big", SHA256: HashAPIKey("big-key"), Weight: 4},
		{Name: "probe", SHA256: HashAPIKey("probe-key"), Exempt: true},
		{Name: "plain", SHA256: HashAPIKey("plain-key")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		header     string
		wantWeight float64
		wantExempt bool
		wantErr    error
	}{
		{name: "weighted key", header: "Bearer big-key", wantWeight: 4},
		{name: "exempt key", header: "Bearer probe-key", wantExempt: true},
		{name: "plain key", header: "Bearer plain-key"},
		{name: "weight claim", header: token(func(c jwt.MapClaims) { c[DefaultWeightClaim] = 2.5 }), wantWeight: 2.5},
		{name: "no weight claim", header: token()},
		{name: "exempt role", header: token(func(c jwt.MapClaims) { c["roles"] = []string{"health"} }), wantExempt: true},
		{name: "weight claim not a number", header: token(func(c jwt.MapClaims) { c[DefaultWeightClaim] = "2" }), wantErr: ErrBadCredentials},
		{name: "weight claim past the most", header: token(func(c jwt.MapClaims) { c[DefaultWeightClaim] = MaxWeight + 1 }), wantErr: ErrBadCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := au.Authenticate(request("Authorization", tc.header))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Authenticate() error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate() error = %v", err)
			}
			if p.Weight != tc.wantWeight || p.Exempt != tc.wantExempt {
				t.Errorf("Authenticate() = weight %v, exempt %v; want %v, %v", p.Weight, p.Exempt, tc.wantWeight, tc.wantExempt)
			}
		})
	}
}
