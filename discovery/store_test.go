package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
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
	kv, err := ToolsBucket(t.Context(), js, bus.DefaultSubjects(), 0, 0, 0)
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

	t.Run("a deleted record is forgotten", func(t *testing.T) {
		reader := persisted(t, kv)
		if !reader.Known("fam.x") {
			t.Fatal("Known(fam.x) = false before its record is deleted")
		}
		if err := kv.Delete(t.Context(), toolKey("fam.*")); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, func() bool { return !reader.Known("fam.x") }, "the registry forgets fam.*")
	})

	// Last, since a registry that reads records past their retention
	// deletes those of tools that were never served.
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
}

// putRecord writes a record to kv as an ingress would.
func putRecord(t *testing.T, kv jetstream.KeyValue, rec toolRecord) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), toolKey(rec.Descriptor.Name), b); err != nil {
		t.Fatal(err)
	}
}

func TestPersistUnservedTools(t *testing.T) {
	_, kv := toolsBucket(t)
	now := time.Now()
	// Records of older ingresses say nothing of being served.
	putRecord(t, kv, toolRecord{Descriptor: schema.Descriptor{Name: "old.junk"}, Seen: now.Add(-2 * UnservedRetention)})
	putRecord(t, kv, toolRecord{Descriptor: schema.Descriptor{Name: "old.fresh"}, Seen: now.Add(-time.Minute)})
	putRecord(t, kv, toolRecord{Descriptor: schema.Descriptor{Name: "old.served"}, Served: true, Seen: now.Add(-2 * UnservedRetention)})

	r := newTestRegistry(t)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r.now = clock
	if err := r.Persist(t.Context(), kv); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Known("old.junk") || !r.Known("old.fresh") || !r.Known("old.served") {
		t.Errorf("Known(old.junk), Known(old.fresh), Known(old.served) = %v, %v, %v; want false, true, true",
			r.Known("old.junk"), r.Known("old.fresh"), r.Known("old.served"))
	}
	testwait.Eventually(t, func() bool { _, ok := stored(t, kv, "old.junk"); return !ok }, "the record of old.junk is deleted")
	if _, ok := stored(t, kv, "old.served"); !ok {
		t.Error("the record of old.served was deleted, want it kept for the retention")
	}

	// A tool announced for long enough is written as served; one
	// announced for a moment is not, and its record goes an hour after
	// its worker.
	for end := now.Add(ServedAfter); !clock().After(end); advance(time.Minute) {
		r.ObserveMethod("report.build", []byte(`{"v":1,"worker":"w1","interval_ms":60000,"tools":[{"name":"report.build"}]}`))
		r.expire(clock())
	}
	r.ObserveMethod("junk.x", one("noisy", `{"name":"junk.x"}`))
	testwait.Eventually(t, func() bool { rec, _ := stored(t, kv, "report.build"); return rec.Served }, "report.build's record says it was served")
	left := clock()
	r.ObserveMethod("report.build", leaving("w1", "report.build"))
	r.ObserveMethod("junk.x", leaving("noisy", "junk.x"))
	testwait.Eventually(t, func() bool {
		junk, _ := stored(t, kv, "junk.x")
		served, _ := stored(t, kv, "report.build")
		return junk.Seen.Equal(left) && served.Seen.Equal(left)
	}, "the bucket holds when the workers left")
	if rec, _ := stored(t, kv, "junk.x"); rec.Served {
		t.Errorf("junk.x's record = %+v, want it not served", rec)
	}
	advance(UnservedRetention + time.Second)
	r.expire(clock())
	testwait.Eventually(t, func() bool { _, ok := stored(t, kv, "junk.x"); return !ok }, "the record of junk.x is deleted")
	if _, ok := stored(t, kv, "report.build"); !ok || !r.Known("report.build") {
		t.Errorf("report.build: stored %v, known %v; want both: it was served", ok, r.Known("report.build"))
	}
}

func TestPersistSharesTheIncumbent(t *testing.T) {
	_, kv := toolsBucket(t)
	first := persisted(t, kv)
	first.ObserveMethod("math.add", one("w1", addTool))
	testwait.Eventually(t, func() bool {
		rec, ok := stored(t, kv, "math.add")
		return ok && len(rec.Descriptor.Params) > 0 && rec.Descriptor.Params[0] == '{'
	},
		"the bucket holds math.add's descriptor")

	t.Run("a registry that hears the newcomer first", func(t *testing.T) {
		second := persisted(t, kv)
		second.ObserveMethod("math.add", one("w2", addOther))
		second.ObserveMethod("math.add", one("w1", addTool))
		if e := layerCall(second, "math.add", `[1]`); !errors.Is(e, schema.ErrInvalidParams) {
			t.Errorf("math.add([1]) = %v, want -32602 from the bucket's descriptor", e)
		}
	})
	t.Run("a registry that heard the workers before it read the bucket", func(t *testing.T) {
		third := newTestRegistry(t)
		third.ObserveMethod("math.add", one("w2", addOther))
		third.ObserveMethod("math.add", one("w1", addTool))
		if err := third.Persist(t.Context(), kv); err != nil {
			t.Fatal(err)
		}
		defer third.Close()
		if e := layerCall(third, "math.add", `[1]`); !errors.Is(e, schema.ErrInvalidParams) {
			t.Errorf("math.add([1]) = %v, want -32602 from the bucket's descriptor", e)
		}
		if p := third.Catalog().Problems; len(p) != 1 || !slices.Equal(p[0].Workers, []string{"w2"}) {
			t.Errorf("problems = %+v, want a conflict of w2", p)
		}
	})
}

func TestToolsBucket(t *testing.T) {
	js, kv := toolsBucket(t)
	again, err := ToolsBucket(t.Context(), js, bus.DefaultSubjects(), 0, 0, 0)
	if err != nil {
		t.Fatalf("ToolsBucket again: %v", err)
	}
	if kv.Bucket() != "toolbus_tools" || again.Bucket() != kv.Bucket() {
		t.Errorf("buckets %q, %q; want toolbus_tools", kv.Bucket(), again.Bucket())
	}
	changed, err := ToolsBucket(t.Context(), js, bus.DefaultSubjects(), 48*time.Hour, 0, 0)
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

// stuckBucket is a bucket whose watch cannot be stopped until release is
// closed, as when ending it asks a server that is gone to delete its
// consumer. Only WatchAll is served.
type stuckBucket struct {
	jetstream.KeyValue
	release chan struct{}
	updates chan jetstream.KeyValueEntry
}

func (b *stuckBucket) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	b.updates <- nil // every record read: there are none
	return stuckWatch{b}, nil
}

type stuckWatch struct{ b *stuckBucket }

func (w stuckWatch) Updates() <-chan jetstream.KeyValueEntry { return w.b.updates }
func (w stuckWatch) Stop() error {
	<-w.b.release
	close(w.b.updates)
	return nil
}

// TestCloseDoesNotWaitForAStuckWatch: Close returns while the watch of
// the bucket is still ending, so that a shutdown with NATS gone does not
// wait out a request to it; the watch ends by itself once it can.
func TestCloseDoesNotWaitForAStuckWatch(t *testing.T) {
	b := &stuckBucket{release: make(chan struct{}), updates: make(chan jetstream.KeyValueEntry, 1)}
	r := newTestRegistry(t)
	if err := r.Persist(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	r.Close() // returns with Stop still blocked, or the test hangs
	select {
	case _, open := <-b.updates:
		if !open {
			t.Fatal("the watch ended before its Stop was released")
		}
	default:
	}
	close(b.release) // the watch ends; goleak checks that it did
}
