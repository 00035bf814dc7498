package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/schema"
)

// APIKeyHeader is the request header that may carry an API key, as an
// alternative to "Authorization: Bearer <key>".
const APIKeyHeader = "X-Api-Key"

// DefaultJWTLeeway is the clock skew tolerated on a token's exp, nbf and
// iat unless [JWT.Leeway] says otherwise.
const DefaultJWTLeeway = 30 * time.Second

// Config says who may call and what each caller may call.
//
// A caller is a name: the Name of an API key, or the caller claim of a JWT.
// Its allowed methods are the patterns of its key, those of Allow under its
// name, or DefaultAllow when it has neither.
//
// A caller's weight is its share of the ingress while other callers are
// busy too (see ingress.Fairness): a caller of weight 2 gets twice the
// calls of one of weight 1. The weight of a key is [APIKey.Weight], that
// of a token its weight claim ([JWT.WeightClaim]); 1 by default. An
// exempt caller ([APIKey.Exempt], a token with [JWT.ExemptRole]) never
// waits in a queue: health checks, operators.
//
// What a caller sees is its own: discovery lists the methods it may call,
// the dashboard its own jobs and errors and the methods it may call, and
// jobs and MCP sessions belong to the caller that made them. An operator
// (a key with [APIKey.Operator], a token with [JWT.OperatorRole]) sees the
// dashboard of every caller and every discovery problem; what it may call
// is still its patterns.
type Config struct {
	// Keys are the accepted API keys.
	Keys []APIKey
	// JWT, when not nil, accepts bearer tokens signed as it says.
	JWT *JWT
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
	// Weight is the caller's share of the ingress while others are busy
	// too, at most [MaxWeight]; zero means 1.
	Weight float64
	// Exempt lets the caller's calls skip the queues of the ingress:
	// they are never held back for other callers, nor refused for a full
	// queue. Give it to health checks and operators, never to a caller
	// that may flood.
	Exempt bool
}

// MaxWeight is the largest weight a caller may have.
const MaxWeight = fair.MaxWeight

// DefaultWeightClaim is the JWT claim that holds a caller's weight unless
// [JWT.WeightClaim] says otherwise.
const DefaultWeightClaim = "toolbus_weight"

// JWT says which bearer tokens are accepted. A token must be signed with
// HS256 under Secret, or with RS256 or ES256 under a key of the JWKS file;
// its iss must be Issuer, its aud must hold Audience, and it must carry an
// exp that has not passed.
type JWT struct {
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
	// (see [Config]); empty (the default) means no token does.
	OperatorRole string
	// RolesClaim names the claim that holds a token's roles: an array of
	// strings, or one string of roles separated by spaces (default
	// "roles").
	RolesClaim string
	// WeightClaim names the claim that holds the caller's weight, a
	// number from 0 (meaning 1) to [MaxWeight] (default
	// [DefaultWeightClaim]); a token without it weighs 1, and one with a
	// weight out of range is refused.
	WeightClaim string
	// ExemptRole is the role that exempts a token's caller from the
	// queues of the ingress (see [APIKey.Exempt]); empty (the default)
	// means no token is exempt.
	ExemptRole string
}

// HashAPIKey returns the hex SHA-256 digest of key, the form in which
// [APIKey.SHA256] stores it.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewAPIKey returns a new API key: "tbk_" and 32 bytes from crypto/rand in
// unpadded base64url. Give the key to its caller once and configure only
// its [HashAPIKey] digest.
func NewAPIKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails: a broken random source crashes the program instead
	return "tbk_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// Errors of [Authenticator.Authenticate].
var (
	// ErrNoCredentials means the request carried neither an API key nor a
	// bearer token.
	ErrNoCredentials = errors.New("auth: no credentials")
	// ErrBadCredentials means the request's key or token was not accepted.
	ErrBadCredentials = errors.New("auth: invalid credentials")
)

// Principal is an authenticated caller. The [Authenticator] that returns
// it may share its slices with other principals: read them, never change
// them.
type Principal struct {
	// Name is the caller.
	Name string
	// Allow are the method patterns it may call (see [schema.MatchMethod]).
	Allow []string
	// Operator makes it see every caller's data (see [Config]).
	Operator bool
	// Weight is its share of the ingress while others are busy too (see
	// [Config]); zero means 1.
	Weight float64
	// Exempt lets its calls skip the queues of the ingress.
	Exempt bool
}

// Allows reports whether p may call method: whether one of its patterns
// matches it.
func (p *Principal) Allows(method string) bool {
	for _, pat := range p.Allow {
		if schema.MatchMethod(pat, method) {
			return true
		}
	}
	return false
}

// String returns the caller's name; the empty string for nil, the caller
// of an ingress without authentication.
func (p *Principal) String() string {
	if p == nil {
		return ""
	}
	return p.Name
}

type keyEntry struct {
	name     string
	digest   [sha256.Size]byte
	allow    []string
	operator bool
	weight   float64
	exempt   bool
}

// Authenticator checks the credentials of requests against a [Config]. It
// is safe for concurrent use.
type Authenticator struct {
	keys         []keyEntry
	allow        map[string][]string
	defaultAllow []string

	jwt          *jwt.Parser
	secret       []byte
	jwks         map[string]any // kid -> public key
	callerClaim  string
	rolesClaim   string
	operatorRole string
	weightClaim  string
	exemptRole   string
}

// New checks c and loads what it names. It fails on a configuration that
// could never admit anyone, on a malformed digest or pattern, and on a
// JWKS file that cannot be read.
func New(c Config) (*Authenticator, error) {
	if len(c.Keys) == 0 && c.JWT == nil {
		return nil, errors.New("auth: needs API keys or a JWT configuration")
	}
	au := &Authenticator{allow: map[string][]string{}, defaultAllow: c.DefaultAllow}
	for caller, patterns := range c.Allow {
		if err := checkPatterns(patterns); err != nil {
			return nil, fmt.Errorf("auth: allow of %q: %w", caller, err)
		}
		au.allow[caller] = patterns
	}
	if err := checkPatterns(c.DefaultAllow); err != nil {
		return nil, fmt.Errorf("auth: default allow: %w", err)
	}
	for i, k := range c.Keys {
		if k.Name == "" {
			return nil, fmt.Errorf("auth: API key %d has no name", i)
		}
		d, err := hex.DecodeString(k.SHA256)
		if err != nil || len(d) != sha256.Size {
			return nil, fmt.Errorf("auth: API key %q: sha256 must be 64 hex digits", k.Name)
		}
		if err := checkPatterns(k.Allow); err != nil {
			return nil, fmt.Errorf("auth: API key %q: %w", k.Name, err)
		}
		if err := fair.CheckWeight(k.Weight); err != nil {
			return nil, fmt.Errorf("auth: API key %q: %w", k.Name, err)
		}
		e := keyEntry{name: k.Name, allow: k.Allow, operator: k.Operator, weight: k.Weight, exempt: k.Exempt}
		copy(e.digest[:], d)
		au.keys = append(au.keys, e)
	}
	if c.JWT != nil {
		if err := au.loadJWT(*c.JWT); err != nil {
			return nil, err
		}
	}
	return au, nil
}

// checkPatterns refuses patterns that can match nothing.
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if err := schema.ValidatePattern(p); err != nil {
			return err
		}
	}
	return nil
}

func (au *Authenticator) loadJWT(c JWT) error {
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("auth: jwt: issuer and audience are required")
	}
	if c.Leeway < 0 {
		return fmt.Errorf("auth: jwt: leeway must not be negative, got %v", c.Leeway)
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
	au.weightClaim, au.exemptRole = c.WeightClaim, c.ExemptRole
	if au.weightClaim == "" {
		au.weightClaim = DefaultWeightClaim
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
		return errors.New("auth: jwt: a secret or a JWKS file is required")
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

// Authenticate returns the caller of r, from the [APIKeyHeader] header or
// the Authorization header (a bearer API key or JWT), or an error wrapping
// [ErrNoCredentials] or [ErrBadCredentials]. It reads r's headers alone.
func (au *Authenticator) Authenticate(r *http.Request) (*Principal, error) {
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
	return au.Credential(cred)
}

// Credential returns the caller of cred, a bearer credential as the
// Authorization header carries it after "Bearer ": a JWT (when JWTs are
// configured and cred has the form of one) or an API key. The dashboard
// checks the key its cookie keeps with it.
func (au *Authenticator) Credential(cred string) (*Principal, error) {
	if cred == "" {
		return nil, ErrNoCredentials
	}
	if au.jwt != nil && strings.Count(cred, ".") == 2 {
		return au.byToken(cred)
	}
	return au.byKey(cred)
}

// byKey compares the digest of key with every configured one in constant
// time, and never stops early, so that timing tells nothing of which key
// came close.
func (au *Authenticator) byKey(key string) (*Principal, error) {
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
	p.Operator, p.Weight, p.Exempt = k.operator, k.weight, k.exempt
	return p, nil
}

func (au *Authenticator) byToken(raw string) (*Principal, error) {
	claims := jwt.MapClaims{}
	if _, err := au.jwt.ParseWithClaims(raw, claims, au.key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCredentials, err)
	}
	name, _ := claims[au.callerClaim].(string)
	if name == "" {
		return nil, fmt.Errorf("token has no %q claim: %w", au.callerClaim, ErrBadCredentials)
	}
	p := au.principal(name, nil)
	p.Operator = au.operatorRole != "" && hasRole(claims[au.rolesClaim], au.operatorRole)
	p.Exempt = au.exemptRole != "" && hasRole(claims[au.rolesClaim], au.exemptRole)
	if v, ok := claims[au.weightClaim]; ok {
		w, isNumber := v.(float64)
		if !isNumber {
			return nil, fmt.Errorf("token's %q claim must be a number: %w", au.weightClaim, ErrBadCredentials)
		}
		if err := fair.CheckWeight(w); err != nil {
			return nil, fmt.Errorf("token's %q claim: %w: %w", au.weightClaim, ErrBadCredentials, err)
		}
		p.Weight = w
	}
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
func (au *Authenticator) key(t *jwt.Token) (any, error) {
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

func (au *Authenticator) principal(name string, keyAllow []string) *Principal {
	allow := keyAllow
	if extra, ok := au.allow[name]; ok {
		allow = append(append([]string(nil), keyAllow...), extra...)
	}
	if allow == nil {
		allow = au.defaultAllow
	}
	return &Principal{Name: name, Allow: allow}
}
