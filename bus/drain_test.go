package bus_test

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// TestDrain checks that Drain delivers the messages a connection holds
// before it closes it, and keeps the connection's own closed handler.
func TestDrain(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	var closedByOwner atomic.Bool
	nc, err := e.Connect(bus.WithNATSOptions(nats.ClosedHandler(func(*nats.Conn) { closedByOwner.Store(true) })))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	const n = 100
	var got atomic.Int64
	release := make(chan struct{})
	if _, err := nc.Subscribe("drain.test", func(*nats.Msg) {
		<-release
		got.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := pub.Publish("drain.test", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	close(release)
	bus.Drain(nc)
	if !nc.IsClosed() {
		t.Error("connection not closed after Drain")
	}
	if got.Load() != n {
		t.Errorf("handled %d messages, want %d", got.Load(), n)
	}
	if !closedByOwner.Load() {
		t.Error("the connection's own closed handler did not run")
	}
	// Draining a closed connection returns at once.
	bus.Drain(nc)
}

// TestDrainSubscription checks that a subscription drains, its closed
// handler running, and that one on a closed connection is an error.
func TestDrainSubscription(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("drain.sub", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	sub.SetClosedHandler(func(string) { close(done) })
	if err := bus.DrainSubscription(nc, sub); err != nil {
		t.Fatalf("DrainSubscription = %v", err)
	}
	<-done
	nc.Close()
	sub, err = nc.Subscribe("drain.sub", func(*nats.Msg) {})
	if err == nil {
		if err := bus.DrainSubscription(nc, sub); err == nil {
			t.Error("DrainSubscription on a closed connection = nil, want an error")
		}
	}
}
