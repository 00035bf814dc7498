package ingress

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
)

// callerKey is the context key of the authenticated caller.
type callerKey struct{}

// Caller returns the caller the ingress authenticated for the request whose
// context is ctx, and false when the ingress runs without [WithAuth].
func Caller(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(callerKey{}).(*auth.Principal)
	if !ok {
		return "", false
	}
	return p.Name, true
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
		if openPaths[r.URL.Path] || (s.a2a != nil && r.URL.Path == a2a.CardPath) || (s.cfg.metrics != nil && r.URL.Path == "/metrics") || (!s.cfg.noDashboard && dashboard.Open(r.URL.Path)) {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.auth.Authenticate(r)
		if err != nil {
			s.unauthorized(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, p)))
	})
}

// unauthorized answers HTTP 401 with a WWW-Authenticate challenge and a
// -32005 body, for a request whose credentials err refused, and logs it.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, err error) {
	start := time.Now()
	challenge := `Bearer realm="toolbus"`
	reason := schema.ReasonUnauthenticated
	if !errors.Is(err, auth.ErrNoCredentials) {
		challenge += `, error="invalid_token"`
		reason = schema.ReasonInvalidCredentials
	}
	w.Header().Set("WWW-Authenticate", challenge)
	o := s.refuse(w, http.StatusUnauthorized, schema.NewError(schema.CodeForbidden,
		"unauthenticated: a valid API key or bearer token is required",
		map[string]any{"reason": reason}))
	o.reason = err.Error()
	s.logRequest(r, "auth", start, o)
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
// be read. See [auth.Config] for what each caller may call and see.
func WithAuth(a auth.Config) Option {
	return func(c *config) error {
		au, err := auth.New(a)
		if err != nil {
			return err
		}
		c.auth = au
		c.authKeys, c.authJWT = len(a.Keys) > 0, a.JWT != nil
		return nil
	}
}
