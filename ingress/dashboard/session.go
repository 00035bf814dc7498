package dashboard

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

// The page keeps the API key its user entered in a cookie that scripts
// cannot read (HttpOnly), that the browser sends to the dashboard's paths
// alone and never with a request another site starts (SameSite=Strict),
// and that ends with the browser session. The server sets it once the key
// was accepted and checks the key again on every request, so a key taken
// out of the configuration stops working at once and no state is kept
// between replicas.
//
// The page's reads are GETs with no effect, which another site could
// neither send with the cookie nor read. Signing in and out change the
// cookie: they are refused when the browser says another site started
// them ([http.CrossOriginProtection]), and signing in takes a JSON body,
// which a form of another site cannot send.

// CookieName names the cookie that holds the dashboard's API key.
const CookieName = "toolbus_dashboard_key"

// cookiePath is where the browser sends the cookie: the dashboard alone.
const cookiePath = "/ui/"

// SessionPath is where the page signs in (POST, a JSON [Login]) and out
// (DELETE).
const SessionPath = "/ui/api/session"

// maxKeyBytes bounds the key a sign-in may post; an API key or a bearer
// token is far shorter, and a cookie holds about 4 kB.
const maxKeyBytes = 2048

// Login is the body of a sign-in.
type Login struct {
	// Key is an API key (or a bearer token) the ingress accepts.
	Key string `json:"key"`
}

// cookieKey returns the key the request's cookie holds, or "" when it
// holds none that could be read.
func cookieKey(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	// A key may hold bytes a cookie may not, so the cookie holds it in
	// base64.
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return string(b)
}

// secure reports whether the browser reached r over TLS, directly or
// through a proxy that says so. Believing a proxy's word can only make
// the cookie stricter: a browser that was not on TLS drops a Secure
// cookie.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// setKeyCookie makes the browser keep key for the dashboard's requests
// until it ends its session.
func setKeyCookie(w http.ResponseWriter, r *http.Request, key string) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    base64.RawURLEncoding.EncodeToString([]byte(key)),
		Path:     cookiePath,
		HttpOnly: true,
		Secure:   secure(r),
		SameSite: http.SameSiteStrictMode,
	})
}

// clearKeyCookie makes the browser forget the key.
func clearKeyCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Path:     cookiePath,
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   secure(r),
		SameSite: http.SameSiteStrictMode,
	})
}

// signIn checks the posted key and, when access accepts it, keeps it in
// the cookie and answers what the key's caller may see, so that the page
// shows it at once.
func (s *site) signIn(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		http.Error(w, "a sign-in is a JSON body {\"key\": \"...\"} sent with Content-Type: application/json", http.StatusUnsupportedMediaType)
		return
	}
	var in Login
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxKeyBytes+64))
	if err := dec.Decode(&in); err != nil || len(in.Key) > maxKeyBytes {
		http.Error(w, "a sign-in is a JSON body {\"key\": \"...\"} with a key of at most 2048 bytes", http.StatusBadRequest)
		return
	}
	in.Key = strings.TrimSpace(in.Key)
	if in.Key == "" {
		http.Error(w, "the sign-in carries no key: send {\"key\": \"...\"} with an API key", http.StatusBadRequest)
		return
	}
	// The posted key alone decides: credentials in the request's headers
	// would otherwise speak for a key that was never checked.
	anon := r.Clone(r.Context())
	anon.Header = http.Header{}
	v, err := s.access.View(anon, in.Key)
	if err != nil {
		s.access.Refuse(w, r, err)
		return
	}
	setKeyCookie(w, r, in.Key)
	s.writeState(w, r, v)
}

// signOut makes the browser forget the key.
func (s *site) signOut(w http.ResponseWriter, r *http.Request) {
	clearKeyCookie(w, r)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
