package dashboard

import (
	"bytes"
	"html/template"
	"log/slog"
	"net/http"
)

// pageData is what the page's template draws: the state the caller may
// see, which the page's script shows before it first polls, or the form
// that asks for a key.
type pageData struct {
	// State is nil when the caller must sign in first.
	State *State
	// KeyNote says why the form asks again, when it does.
	KeyNote string
}

// pagePolicy is the page's Content-Security-Policy: its own script and
// style sheet alone, no inline script, no frame of it on another page
// (the page draws data a caller may see into itself).
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// page answers GET /ui/: the page with the state of its caller drawn
// into it, so that its first paint shows data rather than waiting for a
// poll. The state goes in as JSON in a script element of type
// application/json, which html/template escapes for that place: no text
// of a caller or a tool can close the element or run.
func (s *site) page(w http.ResponseWriter, r *http.Request) {
	var data pageData
	v, fromCookie, err := s.caller(r)
	switch {
	case err == nil:
		st := s.d.State(r.Context(), v, Query{})
		data.State = &st
	case fromCookie:
		clearKeyCookie(w, r)
		data.KeyNote = "The saved key was refused; enter a key again."
	}
	var b bytes.Buffer
	if err := s.d.tmpl.Execute(&b, data); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "dashboard page", slog.String("error", err.Error()))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(b.Bytes())
}

// parsePage parses the page's template from the embedded files.
func parsePage() *template.Template {
	// The template is fixed at build time, and a test parses it.
	return template.Must(template.ParseFS(ui, "ui/index.html"))
}
