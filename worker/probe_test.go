package worker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/worker"
)

func TestProbeHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	if err := c.rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil }); err != nil {
		t.Fatal(err)
	}
	var waiting error
	h := worker.ProbeHandler(reg, func() error {
		if waiting != nil {
			return waiting
		}
		return c.rt.Ready()
	})
	get := func(path string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}

	tests := []struct {
		name     string
		setup    func()
		path     string
		wantCode int
		wantBody string
	}{
		{"healthz before start", func() {}, "/healthz", http.StatusOK, `{"status":"ok"}`},
		{"readyz before start", func() {}, "/readyz", http.StatusServiceUnavailable, `"reason":"` + worker.ErrNotStarted.Error()},
		{"readyz started", func() { c.start(t) }, "/readyz", http.StatusOK, `{"status":"ready"}`},
		{"readyz waiting first", func() { waiting = errors.New("starting: job runner: waiting for JetStream") }, "/readyz",
			http.StatusServiceUnavailable, "waiting for JetStream"},
		{"metrics", func() {}, "/metrics", http.StatusOK, "toolbus_worker_in_flight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			code, body := get(tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("GET %s = %d %s, want %d with %s", tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestProbeHandlerWithoutMetrics(t *testing.T) {
	h := worker.ProbeHandler(nil, func() error { return nil })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics without a gatherer = %d, want 404", rec.Code)
	}
}
