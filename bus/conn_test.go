package bus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

func TestInboxPrefix(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	responder, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Close()
	replies := make(chan string, 1)
	if _, err := responder.Subscribe("svc", func(m *nats.Msg) {
		replies <- m.Reply
		_ = m.Respond([]byte("ok"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}

	nc, err := e.Connect(bus.WithInboxPrefix(bus.WorkerInboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.NewInbox(); !strings.HasPrefix(got, bus.WorkerInboxPrefix+".") {
		t.Errorf("NewInbox() = %q, want it under %s.", got, bus.WorkerInboxPrefix)
	}
	if _, err := nc.Request("svc", nil, 5*time.Second); err != nil {
		t.Fatalf("Request: %v", err)
	}
	if got := <-replies; !strings.HasPrefix(got, bus.WorkerInboxPrefix+".") {
		t.Errorf("the request's reply subject = %q, want it under %s.", got, bus.WorkerInboxPrefix)
	}
}

func TestInboxPrefixChecksInput(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	for _, p := range []string{"", "_INBOX.>", "_INBOX.*", "_INBOX.", ".x", "a..b", "in box"} {
		if nc, err := e.Connect(bus.WithInboxPrefix(p)); err == nil {
			nc.Close()
			t.Errorf("WithInboxPrefix(%q) accepted, want an error", p)
		}
	}
	nc, err := e.Connect(bus.WithInboxPrefix("_INBOX_worker.math"))
	if err != nil {
		t.Fatalf("WithInboxPrefix(%q): %v", "_INBOX_worker.math", err)
	}
	nc.Close()
}
