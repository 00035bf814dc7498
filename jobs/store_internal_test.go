package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// laggingKV answers Get with the entry it was given, as a replica that has
// not applied the latest write would, and everything else as kv does.
type laggingKV struct {
	jetstream.KeyValue
	old jetstream.KeyValueEntry
}

func (l laggingKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) { return l.old, nil }

// TestUpdateDecidesOnTheLeadersRecord checks that a mutation that leaves a
// record alone because of what a lagging read showed is decided again on
// the latest record: a runner finishing its own run must not take an old
// read of the record for another run's.
func TestUpdateDecidesOnTheLeadersRecord(t *testing.T) {
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
	n, err := newNames("toolbus")
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(ctx, js, n, storeConfig{replicas: 1, maxQueued: 10}, true)
	if err != nil {
		t.Fatal(err)
	}
	rec := &stored{JobRecord: schema.JobRecord{ID: "06h34p7hhvaq8r3cv44sm5bzgc", Method: "echo", State: schema.JobQueued, MaxAttempts: 1}}
	if _, err := st.create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	old, err := st.kv.Get(ctx, jobKey(rec.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.update(ctx, rec.ID, func(r *stored) error { r.State, r.RunSeq = schema.JobRunning, 7; return nil }); err != nil {
		t.Fatal(err)
	}
	st.kv = laggingKV{KeyValue: st.kv, old: old}
	got, err := st.update(ctx, rec.ID, func(r *stored) error {
		if r.State != schema.JobRunning || r.RunSeq != 7 {
			return errSkip // another run's, as far as this read shows
		}
		r.State = schema.JobSucceeded
		return nil
	})
	if err != nil || got.State != schema.JobSucceeded {
		t.Fatalf("update after a lagging read = %v, %v; want the run's own record finished", got, err)
	}
	// A skip that the latest record confirms stays a skip.
	if _, err := st.update(ctx, rec.ID, func(*stored) error { return errSkip }); !errors.Is(err, errSkip) {
		t.Errorf("update that skips = %v, want errSkip", err)
	}
}
