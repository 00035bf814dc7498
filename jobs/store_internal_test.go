package jobs

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// laggingKV answers its first lag Gets as a replica that has not applied
// the latest writes yet would: with the entry old, or not found when old
// is nil; then it answers as kv does. A negative lag never catches up.
type laggingKV struct {
	jetstream.KeyValue
	old     jetstream.KeyValueEntry
	lag     *atomic.Int64
	forever bool
}

func lagging(kv jetstream.KeyValue, old jetstream.KeyValueEntry, lag int64) laggingKV {
	l := laggingKV{KeyValue: kv, old: old, lag: new(atomic.Int64), forever: lag < 0}
	l.lag.Store(lag)
	return l
}

func (l laggingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if l.forever || l.lag.Add(-1) >= 0 {
		if l.old == nil {
			return nil, jetstream.ErrKeyNotFound
		}
		return l.old, nil
	}
	return l.KeyValue.Get(ctx, key)
}

// testStore opens a store of the default prefix on a server of its own.
func testStore(t *testing.T) *store {
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
	n := newNames(bus.DefaultSubjects())
	st, err := openStore(t.Context(), js, n, storeConfig{replicas: 1, maxQueued: 10}, true)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestUpdateDecidesOnTheLatestRecord checks that a mutation that would
// leave a record alone because of what a lagging replica showed is decided
// on the latest record: a runner finishing its own run must not take an
// old read of the record for another run's.
func TestUpdateDecidesOnTheLatestRecord(t *testing.T) {
	st := testStore(t)
	ctx := t.Context()
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
	fresh := st.kv
	st.kv = lagging(fresh, old, 2)
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
	// A replica that never catches up is reported, not believed.
	st.kv = lagging(fresh, old, -1)
	if _, _, err := st.get(ctx, rec.ID); !errors.Is(err, errStale) {
		t.Errorf("get from a replica that stays behind = %v, want errStale", err)
	}
}

// TestGetOfAMissingRecord checks when a record found missing is read
// again: on a replicated bucket, since a replica may not have the record
// yet, and never once the key is known to be gone or on a single replica.
func TestGetOfAMissingRecord(t *testing.T) {
	st := testStore(t)
	ctx := t.Context()
	rec := &stored{JobRecord: schema.JobRecord{ID: "06h34p7hhvaq8r3cv44sm5bzgd", Method: "echo", State: schema.JobQueued, MaxAttempts: 1}}
	if _, err := st.create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	fresh := st.kv
	for _, tc := range []struct {
		name       string
		replicated bool
		gone       bool
		lag        int64
		found      bool
		reads      int64 // the Gets made, when found
	}{
		{name: "replica catches up", replicated: true, lag: 2, found: true, reads: 3},
		{name: "replica never catches up", replicated: true, lag: -1},
		{name: "single replica", lag: 2},
		{name: "known gone", replicated: true, gone: true, lag: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.replicated = tc.replicated
			st.known = revisions{}
			st.known.note(jobKey(rec.ID), 1, false)
			if tc.gone {
				st.known.note(jobKey(rec.ID), 2, true)
			}
			l := lagging(fresh, nil, tc.lag)
			st.kv = l
			_, _, err := st.get(ctx, rec.ID)
			if reads := tc.lag - l.lag.Load(); tc.found && (err != nil || reads != tc.reads) {
				t.Errorf("get = %v after %d reads, want the record after %d", err, reads, tc.reads)
			}
			if !tc.found && !errors.Is(err, errNotFound) {
				t.Errorf("get = %v, want errNotFound", err)
			}
		})
	}
}

// TestRevisions checks that a key's newest revision is kept for at least
// one window and forgotten after two, and that an older one never
// replaces it.
func TestRevisions(t *testing.T) {
	var k revisions
	k.note("job.a", 5, false)
	k.note("job.a", 3, false)
	if got := k.newest("job.a"); got.rev != 5 || got.gone {
		t.Fatalf("newest after 5 then 3 = %+v, want 5", got)
	}
	k.note("job.a", 6, true)
	if got := k.newest("job.a"); got.rev != 6 || !got.gone {
		t.Fatalf("newest after a delete at 6 = %+v, want 6 gone", got)
	}
	k.mu.Lock()
	k.since = k.since.Add(-knownWindow)
	k.mu.Unlock()
	if got := k.newest("job.a"); got.rev != 6 {
		t.Errorf("newest one window later = %+v, want 6 still", got)
	}
	k.mu.Lock()
	k.since = k.since.Add(-2 * knownWindow)
	k.mu.Unlock()
	if got := k.newest("job.a"); got.rev != 0 {
		t.Errorf("newest two windows later = %+v, want none", got)
	}
	if n := len(k.cur) + len(k.prev); n != 0 {
		t.Errorf("revisions hold %d keys two windows later, want 0", n)
	}
}
