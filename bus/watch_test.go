package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// TestWatchWithin: a watch made within its bound delivers updates until
// it is stopped.
func TestWatchWithin(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "watchwithin"})
	if err != nil {
		t.Fatal(err)
	}
	w, stop, err := bus.WatchWithin(ctx, kv, "a.>", 10*time.Second, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("WatchWithin = %v", err)
	}
	if _, err := kv.Put(ctx, "a.b", []byte("1")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != "a.b" {
			t.Errorf("update = %v, want a.b", e)
		}
	case <-ctx.Done():
		t.Fatal("no update within 30s")
	}
	stop()
}
