package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/toolbus/toolbus/internal/callstats"
)

// fakeAccess accepts the key "good" (as a caller's view) and "ops" (as
// an operator's), from the cookie or a sign-in, and refuses every other
// request.
type fakeAccess struct {
	open bool // no authentication: everyone sees everything
	// headers records whether View saw credentials in the headers.
	headers bool
}

var errRefused = errors.New("refused")

func (a *fakeAccess) View(r *http.Request, key string) (View, error) {
	if r.Header.Get("Authorization") != "" {
		a.headers = true
	}
	switch {
	case a.open:
		return Everything(), nil
	case key == "good":
		return View{Caller: "bob", MayCall: func(m string) bool { return m == "echo" }}, nil
	case key == "ops":
		return View{Caller: "ops", AllCallers: true}, nil
	}
	return View{}, errRefused
}

func (a *fakeAccess) Refuse(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusUnauthorized)
}

// pageOf parses the page's HTML and returns the text of its script of
// the initial state and the sources of its other scripts.
func pageOf(t *testing.T, body string) (state string, scripts []string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode || n.Data != "script" {
			continue
		}
		attr := map[string]string{}
		for _, a := range n.Attr {
			attr[a.Key] = a.Val
		}
		if attr["id"] == "initial-state" {
			if attr["type"] != "application/json" {
				t.Errorf("the initial state's script has type %q, want application/json", attr["type"])
			}
			if n.FirstChild != nil {
				state = n.FirstChild.Data
			}
			continue
		}
		scripts = append(scripts, attr["src"])
	}
	return state, scripts
}

// TestPageEmbedsState checks that the page holds the state its caller
// may see, escaped so that no text of a caller or a tool can end the
// element that holds it or run as a script.
func TestPageEmbedsState(t *testing.T) {
	stats := callstats.New()
	stats.Begin("echo")
	stats.End("echo", 0, 2001)
	hostile := `</script><script>alert(1)</script><!-- "quoted" & <b>`
	stats.RecordError(callstats.ErrorAnswer{ID: "7", Method: "echo", Code: 2001, Message: hostile})
	h := New(Source{ID: "i1", Stats: stats, InFlight: func() int64 { return 0 }}).Handler(&fakeAccess{open: true}, discardLog)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ui/ = %d %s", rec.Code, rec.Body)
	}
	for k, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "X-Frame-Options": "DENY",
	} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q, want scripts of the page's own and no framing", csp)
	}
	text, scripts := pageOf(t, rec.Body.String())
	if len(scripts) != 1 || scripts[0] != "app.js" {
		t.Errorf("the page's scripts are %q, want app.js alone", scripts)
	}
	var st State
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatalf("the initial state %q is not JSON: %v", text, err)
	}
	if len(st.RecentErrors) != 1 || st.RecentErrors[0].Message != hostile {
		t.Errorf("the initial state's errors = %+v, want the message %q as it was", st.RecentErrors, hostile)
	}
	if len(st.Methods) != 1 || st.Methods[0].Method != "echo" || st.Methods[0].Total != 1 {
		t.Errorf("the initial state's methods = %+v, want echo with one call", st.Methods)
	}
}

// TestPageAsksForKey checks that without an accepted key the page holds
// no state and shows the form, and that a cookie whose key is refused is
// dropped with a note.
func TestPageAsksForKey(t *testing.T) {
	h := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 }}).Handler(&fakeAccess{}, discardLog)
	tests := []struct {
		name    string
		cookie  string
		note    string
		cleared bool
	}{
		{name: "no cookie"},
		{name: "refused cookie", cookie: "stale", note: "The saved key was refused", cleared: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/ui/", nil)
			if tt.cookie != "" {
				r.AddCookie(keyCookie(tt.cookie))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			body := rec.Body.String()
			if text, _ := pageOf(t, body); strings.TrimSpace(text) != "null" {
				t.Errorf("the initial state = %q, want null", text)
			}
			if strings.Contains(body, `<form id="auth" hidden>`) || !strings.Contains(body, `<form id="auth">`) {
				t.Errorf("the key form is hidden, want it shown")
			}
			if !strings.Contains(body, tt.note) {
				t.Errorf("the page does not say %q", tt.note)
			}
			if got := clearsCookie(rec.Result()); got != tt.cleared {
				t.Errorf("cookie cleared = %v, want %v", got, tt.cleared)
			}
		})
	}
}

// TestPageCookieView checks that the page drawn for a cookie's key holds
// that caller's state, its own rows alone.
func TestPageCookieView(t *testing.T) {
	stats := callstats.New()
	for _, m := range []string{"echo", "secret"} {
		stats.Begin(m)
		stats.End(m, 0, 0)
	}
	h := New(Source{ID: "i1", Stats: stats, InFlight: func() int64 { return 0 }}).Handler(&fakeAccess{}, discardLog)
	r := httptest.NewRequest(http.MethodGet, "/ui/", nil)
	r.AddCookie(keyCookie("good"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	text, _ := pageOf(t, rec.Body.String())
	var st State
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatalf("the initial state %q is not JSON: %v", text, err)
	}
	if st.Caller != "bob" || st.AllCallers || len(st.Methods) != 1 || st.Methods[0].Method != "echo" {
		t.Errorf("the page's state = caller %q, all %v, methods %+v; want bob's echo alone", st.Caller, st.AllCallers, st.Methods)
	}
}
