package ingress

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
)

// serveHealth answers 200 for as long as the process serves HTTP: it is a
// liveness check, and nothing a restart would fix makes it fail.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, http.StatusOK, "ok", "")
	s.log.LogAttrs(r.Context(), slog.LevelDebug, "health", slog.Int("status", http.StatusOK))
}

// serveReady answers 200 when the ingress should receive traffic and 503
// with the reason when it should not: while shutting down, or when the
// readiness check fails.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	status, reason := http.StatusOK, ""
	switch {
	case s.closing.Load():
		status, reason = http.StatusServiceUnavailable, "shutting down"
	case s.cfg.ready != nil:
		if err := s.cfg.ready(r.Context()); err != nil {
			status, reason = http.StatusServiceUnavailable, err.Error()
		}
	}
	if status == http.StatusOK {
		writeStatus(w, status, "ready", "")
	} else {
		writeStatus(w, status, "unavailable", reason)
	}
	s.log.LogAttrs(r.Context(), slog.LevelDebug, "readiness",
		slog.Int("status", status), slog.String("reason", reason))
}

// writeStatus writes {"status": status, "reason": reason} for probes and
// the people reading them.
func writeStatus(w http.ResponseWriter, code int, status, reason string) {
	body, _ := json.Marshal(struct {
		Status string `json:"status"`
		Reason string `json:"reason,omitempty"`
	}{status, reason})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
