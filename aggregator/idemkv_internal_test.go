package aggregator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// idemBench is an embedded server with a bucket of idempotency records,
// seen through a [countingKV], and a worker whose "hold" tool blocks until
// release is closed.
type idemBench struct {
	ac      *nats.Conn
	js      jetstream.JetStream
	kv      *countingKV
	runs    atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func newIdemBench(t *testing.T) *idemBench {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	conns := make([]*nats.Conn, 2)
	for i := range conns {
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[i] = nc
	}
	b := &idemBench{ac: conns[0], entered: make(chan struct{}, 64), release: make(chan struct{})}
	if b.js, err = jetstream.New(b.ac); err != nil {
		t.Fatal(err)
	}
	kv, err := IdempotencyBucket(context.Background(), b.js, bus.DefaultSubjects(), time.Minute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.kv = &countingKV{KeyValue: kv}
	sub, err := conns[1].QueueSubscribe("toolbus.call.hold", "toolbus-workers", func(m *nats.Msg) {
		go func() {
			b.runs.Add(1)
			b.entered <- struct{}{}
			<-b.release
			bus.Reply(m, schema.ReplyResult([]byte(`"held"`)))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := conns[1].Flush(); err != nil {
		t.Fatal(err)
	}
	return b
}

// agg returns an aggregator that keeps its records in store, which it
// opens on the bench's bucket.
func (b *idemBench) agg(t *testing.T, store *IdempotencyStore) *Aggregator {
	t.Helper()
	store.Open(b.kv)
	a, err := New(b.ac, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithIdempotencyStore(store))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// consumers returns how many consumers the bucket's stream has.
func (b *idemBench) consumers(t *testing.T) int {
	t.Helper()
	s, err := b.js.Stream(context.Background(), "KV_"+b.kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// keyed returns a call of the hold tool with idempotency key k, answered
// within timeout.
func keyed(id, k string, timeout time.Duration) []schema.Call {
	calls := []schema.Call{{Request: schema.Request{ID: []byte(id), Method: "hold"}, Timeout: timeout}}
	schema.SetIdempotencyKey(calls, k)
	return calls
}

// countingKV counts the operations on a bucket; with broken set, a watch
// cannot be created.
type countingKV struct {
	jetstream.KeyValue
	broken bool

	gets, creates, updates, watches atomic.Int64
	// at, when set, stamps each get.
	at func() time.Time

	mu     sync.Mutex
	getsAt []time.Time
}

var errBrokenWatch = errors.New("test: this bucket cannot be watched")

func (kv *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.gets.Add(1)
	if kv.at != nil {
		kv.mu.Lock()
		kv.getsAt = append(kv.getsAt, kv.at())
		kv.mu.Unlock()
	}
	return kv.KeyValue.Get(ctx, key)
}

func (kv *countingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv.creates.Add(1)
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv *countingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	kv.updates.Add(1)
	return kv.KeyValue.Update(ctx, key, value, rev)
}

func (kv *countingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv.watches.Add(1)
	if kv.broken {
		return nil, errBrokenWatch
	}
	return kv.KeyValue.Watch(ctx, keys, opts...)
}

func (kv *countingKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv.watches.Add(1)
	if kv.broken {
		return nil, errBrokenWatch
	}
	return kv.KeyValue.WatchFiltered(ctx, keys, opts...)
}

func (kv *countingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv.watches.Add(1)
	if kv.broken {
		return nil, errBrokenWatch
	}
	return kv.KeyValue.WatchAll(ctx, opts...)
}

// stamps returns the times of the gets.
func (kv *countingKV) stamps() []time.Time {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return append([]time.Time(nil), kv.getsAt...)
}

// fakeIdemClock is an [idemClock] whose time moves only when the test
// fires its next timer. armed receives when a timer is set.
type fakeIdemClock struct {
	armed chan struct{}

	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer
	asked  []time.Duration
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeIdemClock(start time.Time) *fakeIdemClock {
	return &fakeIdemClock{t: start, armed: make(chan struct{}, 1)}
}

func (f *fakeIdemClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeIdemClock) after(d time.Duration) (<-chan time.Time, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, d)
	tm := &fakeTimer{at: f.t.Add(d), c: make(chan time.Time, 1)}
	f.timers = append(f.timers, tm)
	select {
	case f.armed <- struct{}{}:
	default:
	}
	return tm.c, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, o := range f.timers {
			if o == tm {
				f.timers = append(f.timers[:i], f.timers[i+1:]...)
				return
			}
		}
	}
}

// fire moves the time to the earliest timer and fires it; it reports
// whether there was one.
func (f *fakeIdemClock) fire() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return false
	}
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	tm := f.timers[0]
	f.timers = f.timers[1:]
	if tm.at.After(f.t) {
		f.t = tm.at
	}
	tm.c <- f.t
	return true
}

// pending returns how many timers are set.
func (f *fakeIdemClock) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// durations returns every wait asked for.
func (f *fakeIdemClock) durations() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.asked...)
}
