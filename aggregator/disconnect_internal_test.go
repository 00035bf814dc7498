package aggregator

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// TestFullReconnectBufferIsBusDisconnected checks that a publication the
// full reconnect buffer refuses is answered as a call made while NATS is
// away: -32003 bus_disconnected, which a job takes as "nothing ran".
func TestFullReconnectBufferIsBusDisconnected(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a, err := New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := &schema.Call{Request: schema.Request{Method: "echo"}}
	got := a.publishError(c.Method, fmt.Errorf("publish: %w", nats.ErrReconnectBufExceeded))
	if got.Code != schema.CodeUnavailable || got.Reason() != schema.ReasonBusDisconnected {
		t.Errorf("publishError(%v) = %d %q, want %d %q", nats.ErrReconnectBufExceeded,
			got.Code, got.Reason(), schema.CodeUnavailable, schema.ReasonBusDisconnected)
	}
}
