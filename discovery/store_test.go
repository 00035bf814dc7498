package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// toolsBucket starts an embedded NATS and returns its bucket of known
// tools, both gone when the test ends.
func toolsBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
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
	kv, err := ToolsBucket(t.Context(), js, "toolbus", 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// persisted returns a registry that keeps its known tools in kv, closed
// when the test ends.
func persisted(t *testing.T, kv jetstream.KeyValue) *Registry {
	t.Helper()
	r := newTestRegistry(t)
	if err := r.Persist(t.Context(), kv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// stored reads the bucket's record of name, if there is one.
func stored(t *testing.T, kv jetstream.KeyValue, name string) (toolRecord, bool) {
	t.Helper()
	e, err := kv.Get(t.Context(), toolKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return toolRecord{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec toolRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec, true
}

func TestPersist(t *testing.T) {
	_, kv := toolsBucket(t)

	// Tools heard before the bucket could be read are written once it is.
	first := newTestRegistry(t)
	defer first.Close()
	first.Observe(ann("w1", addTool, famTool))
	if err := first.Persist(t.Context(), kv); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, func() bool { _, ok := stored(t, kv, "fam.*"); return ok }, "the bucket holds fam.*")
	testwait.Eventually(t, func() bool { _, ok := stored(t, kv, "math.add"); return ok }, "the bucket holds math.add")

	t.Run("shared by registries on one NATS", func(t *testing.T) {
		second := persisted(t, kv)
		if !second.Known("math.add") || !second.Known("fam.x") {
			t.Fatalf("a second registry: Known(math.add), Known(fam.x) = %v, %v; want true", second.Known("math.add"), second.Known("fam.x"))
		}
		if waiting, e := second.Check("math.add", json.RawMessage(`{"a":"x"}`), true); !errors.Is(e, schema.ErrInvalidParams) {
			t.Errorf("second.Check(math.add, bad params) = %q, %v; want -32602 from the stored schema", waiting, e)
		}
		if waiting, e := second.Check("math.add", json.RawMessage(`{"a":1}`), true); waiting != schema.ReasonNoWorkers || e != nil {
			t.Errorf("second.Check(math.add) = %q, %v; want %q: no worker announced to it", waiting, e, schema.ReasonNoWorkers)
		}
		first.Observe(ann("w2", echoTool))
		testwait.Eventually(t, func() bool { return second.Known("echo") }, "the second registry knows echo, announced to the first")
		if _, ok := second.Lookup("echo"); ok {
			t.Error("second.Lookup(echo) found a live tool; a stored tool is known, not live")
		}
	})

	t.Run("the last sight of a worker is written", func(t *testing.T) {
		before, _ := stored(t, kv, "math.add")
		first.Observe(leave("w1"))
		testwait.Eventually(t, func() bool { rec, _ := stored(t, kv, "math.add"); return rec.Seen.After(before.Seen) },
			"the bucket holds when math.add's last worker left")
	})

	t.Run("known after a restart", func(t *testing.T) {
		first.Close()
		restarted := persisted(t, kv)
		for _, m := range []string{"math.add", "fam.x", "echo"} {
			if !restarted.Known(m) {
				t.Errorf("after a restart, Known(%s) = false, want true", m)
			}
		}
		if _, e := restarted.Check("never", nil, true); !errors.Is(e, schema.ErrMethodNotFound) {
			t.Errorf("after a restart, Check(never) = %v, want -32601", e)
		}
	})

	t.Run("a record past the retention is not known", func(t *testing.T) {
		late := newTestRegistry(t)
		late.now = func() time.Time { return time.Now().Add(DefaultRetention + time.Hour) }
		if err := late.Persist(t.Context(), kv); err != nil {
			t.Fatal(err)
		}
		defer late.Close()
		if late.Known("math.add") {
			t.Error("Known(math.add) = true for a record older than the retention")
		}
	})

	t.Run("a deleted record is forgotten", func(t *testing.T) {
		reader := persisted(t, kv)
		if err := kv.Delete(t.Context(), toolKey("fam.*")); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, func() bool { return !reader.Known("fam.x") }, "the registry forgets fam.*")
	})
}

func TestToolsBucket(t *testing.T) {
	js, kv := toolsBucket(t)
	again, err := ToolsBucket(t.Context(), js, "toolbus", 0, 0, 0)
	if err != nil {
		t.Fatalf("ToolsBucket again: %v", err)
	}
	if kv.Bucket() != "toolbus_tools" || again.Bucket() != kv.Bucket() {
		t.Errorf("buckets %q, %q; want toolbus_tools", kv.Bucket(), again.Bucket())
	}
	changed, err := ToolsBucket(t.Context(), js, "toolbus", 48*time.Hour, 0, 0)
	if err != nil {
		t.Fatalf("ToolsBucket with another retention: %v", err)
	}
	st, err := changed.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 48*time.Hour {
		t.Errorf("TTL = %v, want 48h", st.TTL())
	}
}
