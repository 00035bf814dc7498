package ingress_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// TestNATSGoneAfterStart checks what an ingress says once NATS has gone
// away under it: /readyz says it is unavailable and why, /healthz still
// passes (a restart would not bring NATS back), and a new call is
// answered -32003 bus_disconnected at once rather than at its deadline.
func TestNATSGoneAfterStart(t *testing.T) {
	c := toolbustest.Start(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	if r := c.Call(t, "echo", `{"x":1}`); r.Error != nil {
		t.Fatalf("echo before NATS went away = %v, want a result", r.Error)
	}

	c.NATS.Shutdown()
	var ready probe
	testwait.Eventually(t, func() bool {
		ready = get(t, client, c.BaseURL+"/readyz")
		return ready.code == http.StatusServiceUnavailable
	}, "/readyz says the ingress is not ready")
	if ready.Status != "unavailable" || !strings.Contains(ready.Reason, "nats") {
		t.Errorf("GET /readyz = %+v, want unavailable with a reason about NATS", ready)
	}
	if h := get(t, client, c.BaseURL+"/healthz"); h.code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200 while NATS is away", h.code)
	}

	r := c.Call(t, "echo", `{"x":2}`, schema.HeaderTimeout, "30s")
	switch {
	case r.Error == nil:
		t.Fatalf("echo while NATS is away = %s, want an error", r.Result)
	case r.Error.Code == schema.CodeTimeout:
		t.Fatalf("echo while NATS is away waited out its deadline: %v", r.Error)
	case r.Error.Code != schema.CodeUnavailable || r.Error.Reason() != schema.ReasonBusDisconnected:
		t.Errorf("echo while NATS is away = %d %q, want %d %q",
			r.Error.Code, r.Error.Reason(), schema.CodeUnavailable, schema.ReasonBusDisconnected)
	}
}

// probe is the answer of a health endpoint.
type probe struct {
	code   int
	Status string `json:"status"`
	Reason string `json:"reason"`
}

func get(t *testing.T, client *http.Client, url string) probe {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	p := probe{code: resp.StatusCode}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("GET %s = %s: %v", url, b, err)
	}
	return p
}
