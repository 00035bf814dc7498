package ingress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
)

// APIKeyHeader is the request header that may carry an API key, as an
// alternative to "Authorization: Bearer <key>".
const APIKeyHeader = "X-Api-Key"

// DefaultJWTLeeway is the clock skew tolerated on a token's exp, nbf and
// iat unless [JWTConfig.Leeway] says otherwise.
const DefaultJWTLeeway = 30 * time.Second

// Auth says who may call the ingress and what each caller may call. It is
// given to [WithAuth]; without that option the ingress is open, and every
// call goes out with an empty caller.
//
// A caller is a name: the Name of an API key, or the caller claim of a JWT.
// Its allowed methods are the patterns of its key, those of Allow under its
// name, or DefaultAllow when it has neither.
//
// What a caller sees is its own: discovery lists the methods it may call,
// the dashboard its own jobs and errors and the methods it may call, and
// jobs and MCP sessions belong to the caller that made them. An operator
// (a key with [APIKey.Operator], a token with [JWTConfig.OperatorRole])
// sees the dashboard of every caller and every discovery problem; what it
// may call is still its patterns.
type Auth struct {
	// Keys are the accepted API keys.
	Keys []APIKey
	// JWT, when not nil, accepts bearer tokens signed as it says.
	JWT *JWTConfig
	// Allow maps a caller to the method patterns it may call.
	Allow map[string][]string
	// DefaultAllow are the patterns of a caller with none of its own. Empty
	// (the default) means such a caller may call nothing.
	DefaultAllow []string
}

// APIKey is one accepted API key. The key itself is never configured: only
// its SHA-256 digest, which [HashAPIKey] computes.
type APIKey struct {
	// Name is the caller the key authenticates; it must not be empty.
	Name string
	// SHA256 is the hex SHA-256 digest of the key.
	SHA256 string
	// Allow are the method patterns this caller may call.
	Allow []string
	// Operator makes the key an operator's: it sees every caller's data on
	// the dashboard (default false: its own).
	Operator bool
}

// JWTConfig says which bearer tokens the ingress accepts. A token must be
// signed with HS256 under Secret, or with RS256 or ES256 under a key of the
// JWKS file; its iss must be Issuer, its aud must hold Audience, and it must
// carry an exp that has not passed.
type JWTConfig struct {
	// Secret is the HS256 key; empty means HS256 tokens are refused.
	Secret []byte
	// JWKSFile is the path of a JSON Web Key Set of RSA and EC (P-256)
	// public keys; empty means RS256 and ES256 tokens are refused.
	JWKSFile string
	// Issuer and Audience are required.
	Issuer   string
	Audience string
	// Leeway is the clock skew tolerated (default [DefaultJWTLeeway]).
	Leeway time.Duration
	// CallerClaim names the claim that holds the caller (default "sub").
	CallerClaim string
	// OperatorRole is the role that makes a token's caller an operator
	// (see [Auth]); empty (the default) means no token does.
	OperatorRole string
	// RolesClaim names the claim that holds a token's roles: an array of
	// strings, or one string of roles separated by spaces (default
	// "roles").
	RolesClaim string
}

// HashAPIKey returns the hex SHA-256 digest of key, the form in which
// [APIKey.SHA256] stores it.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Errors of authentication; the 401 answer says which in data.reason.
var (
	// ErrNoCredentials means the request carried neither an API key nor a
	// bearer token.
	ErrNoCredentials = errors.New("ingress: no credentials")
	// ErrBadCredentials means the request's key or token was not accepted.
	ErrBadCredentials = errors.New("ingress: invalid credentials")
)

// principal is an authenticated caller.
type principal struct {
	name     string
	allow    []string
	operator bool
}

type keyEntry struct {
	name     string
	digest   [sha256.Size]byte
	allow    []string
	operator bool
}

// authenticator checks the credentials of a request.
type authenticator struct {
	keys         []keyEntry
	allow        map[string][]string
	defaultAllow []string

	jwt          *jwt.Parser
	secret       []byte
	jwks         map[string]any // kid -> public key
	callerClaim  string
	rolesClaim   string
	operatorRole string
}

// newAuthenticator checks a and loads what it names.
func newAuthenticator(a Auth) (*authenticator, error) {
	if len(a.Keys) == 0 && a.JWT == nil {
		return nil, errors.New("ingress: auth needs API keys or a JWT configuration")
	}
	au := &authenticator{allow: map[string][]string{}, defaultAllow: a.DefaultAllow}
	for caller, patterns := range a.Allow {
		if err := checkPatterns(patterns); err != nil {
			return nil, fmt.Errorf("ingress: allow of %q: %w", caller, err)
		}
		au.allow[caller] = patterns
	}
	if err := checkPatterns(a.DefaultAllow); err != nil {
		return nil, fmt.Errorf("ingress: default allow: %w", err)
	}
	for i, k := range a.Keys {
		if k.Name == "" {
			return nil, fmt.Errorf("ingress: API key %d has no name", i)
		}
		d, err := hex.DecodeString(k.SHA256)
		if err != nil || len(d) != sha256.Size {
			return nil, fmt.Errorf("ingress: API key %q: sha256 must be 64 hex digits", k.Name)
		}
		if err := checkPatterns(k.Allow); err != nil {
			return nil, fmt.Errorf("ingress: API key %q: %w", k.Name, err)
		}
		e := keyEntry{name: k.Name, allow: k.Allow, operator: k.Operator}
		copy(e.digest[:], d)
		au.keys = append(au.keys, e)
	}
	if a.JWT != nil {
		if err := au.loadJWT(*a.JWT); err != nil {
			return nil, err
		}
	}
	return au, nil
}

func (au *authenticator) loadJWT(c JWTConfig) error {
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("ingress: jwt: issuer and audience are required")
	}
	if c.Leeway < 0 {
		return fmt.Errorf("ingress: jwt: leeway must not be negative, got %v", c.Leeway)
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultJWTLeeway
	}
	au.callerClaim = c.CallerClaim
	if au.callerClaim == "" {
		au.callerClaim = "sub"
	}
	au.rolesClaim, au.operatorRole = c.RolesClaim, c.OperatorRole
	if au.rolesClaim == "" {
		au.rolesClaim = "roles"
	}
	var methods []string
	if len(c.Secret) > 0 {
		au.secret = c.Secret
		methods = append(methods, "HS256")
	}
	if c.JWKSFile != "" {
		keys, err := readJWKS(c.JWKSFile)
		if err != nil {
			return err
		}
		au.jwks = keys
		methods = append(methods, "RS256", "ES256")
	}
	if len(methods) == 0 {
		return errors.New("ingress: jwt: a secret or a JWKS file is required")
	}
	au.jwt = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(c.Issuer),
		jwt.WithAudience(c.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(c.Leeway),
	)
	return nil
}

// authenticate returns the caller of r, or an error wrapping
// [ErrNoCredentials] or [ErrBadCredentials].
func (au *authenticator) authenticate(r *http.Request) (*principal, error) {
	if key := r.Header.Get(APIKeyHeader); key != "" {
		return au.byKey(key)
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, ErrNoCredentials
	}
	scheme, cred, ok := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return nil, fmt.Errorf("authorization scheme must be Bearer: %w", ErrBadCredentials)
	}
	if au.jwt != nil && strings.Count(cred, ".") == 2 {
		return au.byToken(cred)
	}
	return au.byKey(cred)
}

// byKey compares the digest of key with every configured one in constant
// time, and never stops early, so that timing tells nothing of which key
// came close.
func (au *authenticator) byKey(key string) (*principal, error) {
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range au.keys {
		if subtle.ConstantTimeCompare(d[:], au.keys[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, fmt.Errorf("unknown API key: %w", ErrBadCredentials)
	}
	k := &au.keys[found]
	p := au.principal(k.name, k.allow)
	p.operator = k.operator
	return p, nil
}

func (au *authenticator) byToken(raw string) (*principal, error) {
	claims := jwt.MapClaims{}
	if _, err := au.jwt.ParseWithClaims(raw, claims, au.key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCredentials, err)
	}
	name, _ := claims[au.callerClaim].(string)
	if name == "" {
		return nil, fmt.Errorf("token has no %q claim: %w", au.callerClaim, ErrBadCredentials)
	}
	p := au.principal(name, nil)
	p.operator = au.operatorRole != "" && hasRole(claims[au.rolesClaim], au.operatorRole)
	return p, nil
}

// hasRole reports whether the roles claim v, an array of strings or one
// string of space-separated roles, holds role.
func hasRole(v any, role string) bool {
	switch roles := v.(type) {
	case string:
		return slices.Contains(strings.Fields(roles), role)
	case []any:
		for _, r := range roles {
			if r == role {
				return true
			}
		}
	}
	return false
}

// key finds the verification key of a token: the secret for HS256, the
// JWKS key named by kid otherwise (the only key when the token names none
// and the set holds one).
func (au *authenticator) key(t *jwt.Token) (any, error) {
	if _, ok := t.Method.(*jwt.SigningMethodHMAC); ok {
		return au.secret, nil
	}
	kid, _ := t.Header["kid"].(string)
	if kid == "" && len(au.jwks) == 1 {
		for _, k := range au.jwks {
			return k, nil
		}
	}
	k, ok := au.jwks[kid]
	if !ok {
		return nil, fmt.Errorf("no key %q in the JWKS", kid)
	}
	return k, nil
}

func (au *authenticator) principal(name string, keyAllow []string) *principal {
	allow := keyAllow
	if extra, ok := au.allow[name]; ok {
		allow = append(append([]string(nil), keyAllow...), extra...)
	}
	if allow == nil {
		allow = au.defaultAllow
	}
	return &principal{name: name, allow: allow}
}

// jwk is the part of a JSON Web Key that toolbus reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// readJWKS reads the RSA and P-256 EC public keys of a JWKS file, by kid.
func readJWKS(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ingress: jwks: %w", err)
	}
	keys, err := parseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("ingress: jwks %s: %w", path, err)
	}
	return keys, nil
}

func parseJWKS(b []byte) (map[string]any, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var pub any
		var err error
		switch k.Kty {
		case "RSA":
			pub, err = rsaKey(k)
		case "EC":
			pub, err = ecKey(k)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (%q): %w", i, k.Kid, err)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("key %d: kid %q appears twice", i, k.Kid)
		}
		out[k.Kid] = pub
	}
	if len(out) == 0 {
		return nil, errors.New("no RSA or EC signing key")
	}
	return out, nil
}

func rsaKey(k jwk) (*rsa.PublicKey, error) {
	n, err := base64.RawURLEncoding.DecodeString(k.N)
	if err != nil || len(n) == 0 {
		return nil, errors.New("bad RSA modulus n")
	}
	e, err := base64.RawURLEncoding.DecodeString(k.E)
	if err != nil || len(e) == 0 || len(e) > 4 {
		return nil, errors.New("bad RSA exponent e")
	}
	exp := int(new(big.Int).SetBytes(e).Int64())
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
}

func ecKey(k jwk) (*ecdsa.PublicKey, error) {
	if k.Crv != "P-256" {
		return nil, fmt.Errorf("EC curve %q is not P-256", k.Crv)
	}
	x, errX := base64.RawURLEncoding.DecodeString(k.X)
	y, errY := base64.RawURLEncoding.DecodeString(k.Y)
	if errX != nil || errY != nil || len(x) > 32 || len(y) > 32 {
		return nil, errors.New("bad EC coordinates")
	}
	point := make([]byte, 65)
	point[0] = 4
	copy(point[1+32-len(x):33], x)
	copy(point[33+32-len(y):], y)
	return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
}

// callerKey is the context key of the authenticated caller.
type callerKey struct{}

// Caller returns the caller the ingress authenticated for the request whose
// context is ctx, and false when the ingress runs without [WithAuth].
func Caller(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(callerKey{}).(*principal)
	if !ok {
		return "", false
	}
	return p.name, true
}

// openPaths are answered without credentials, so that probes need none.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// authMiddleware answers 401, before reading any body, a request to any
// route but the probes that carries no accepted credentials, and puts the
// caller of the others in their context.
func (s *Server) authMiddleware(next http.Handler) http.Handler {
	if s.auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] || (s.cfg.metrics != nil && r.URL.Path == "/metrics") || (!s.cfg.noDashboard && dashboard.Open(r.URL.Path)) {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.auth.authenticate(r)
		if err != nil {
			start := time.Now()
			challenge := `Bearer realm="toolbus"`
			reason := schema.ReasonUnauthenticated
			if !errors.Is(err, ErrNoCredentials) {
				challenge += `, error="invalid_token"`
				reason = schema.ReasonInvalidCredentials
			}
			w.Header().Set("WWW-Authenticate", challenge)
			o := s.refuse(w, http.StatusUnauthorized, schema.NewError(schema.CodeForbidden,
				"unauthenticated: a valid API key or bearer token is required",
				map[string]any{"reason": reason}))
			o.reason = err.Error()
			s.logRequest(r, "auth", start, o)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, p)))
	})
}

// WithAuth turns authentication and authorization on (default off: the
// ingress is open, and every call goes out with an empty caller). Every
// route but /healthz and /readyz then needs an API key (Authorization:
// Bearer <key>, or X-Api-Key) or a bearer JWT, and a request without an
// accepted one is answered HTTP 401 with a WWW-Authenticate challenge
// before its body is read. Each call of a message is checked against its
// caller's allowed patterns; a denied call is answered -32005 for its id
// alone. The caller goes with every call to the workers and owns the jobs
// it submits. WithAuth fails on a configuration that could never admit
// anyone, on a malformed digest or pattern, and on a JWKS file that cannot
// be read.
func WithAuth(a Auth) Option {
	return func(c *config) error {
		au, err := newAuthenticator(a)
		if err != nil {
			return err
		}
		c.auth = au
		return nil
	}
}
