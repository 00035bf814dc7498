package aggregator_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// benchBus starts an embedded server and returns a connection for the
// aggregator and one for a worker, closed when b ends.
func benchBus(b *testing.B) (aggConn, workerConn *nats.Conn) {
	b.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Shutdown)
	for _, p := range []**nats.Conn{&aggConn, &workerConn} {
		nc, err := e.Connect()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		*p = nc
	}
	return aggConn, workerConn
}

// benchEcho answers every call of echo on nc with its params, from the
// subscription's own goroutine: the cheapest worker there is, so that
// what is measured is the aggregator's side.
func benchEcho(b *testing.B, nc *nats.Conn) {
	b.Helper()
	sub, err := nc.QueueSubscribe("toolbus.call.echo", "toolbus-workers", func(m *nats.Msg) {
		env, _, err := bus.ReadCall(m)
		if err != nil {
			bus.Reply(m, schema.ReplyError(schema.ErrorFrom(err)))
			return
		}
		bus.Reply(m, schema.ReplyResult(env.Params))
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// benchCalls returns n calls of echo with ids 1 to n.
func benchCalls(n int) []schema.Call {
	calls := make([]schema.Call, n)
	for i := range calls {
		calls[i] = schema.Call{Request: schema.Request{Method: "echo",
			ID: json.RawMessage(strconv.Itoa(i + 1)), Params: json.RawMessage(`{"x":1}`)}}
	}
	return calls
}

// benchDispatch measures batches of size calls of echo over an embedded
// NATS, per call, with heartbeats as hb says.
func benchDispatch(b *testing.B, size int, hb time.Duration) {
	ac, wc := benchBus(b)
	benchEcho(b, wc)
	a, err := aggregator.New(ac, aggregator.WithLogger(quiet), aggregator.WithHeartbeat(hb, 3))
	if err != nil {
		b.Fatal(err)
	}
	calls := benchCalls(size)
	var failed atomic.Int64
	emit := func(_ int, r schema.Response) {
		if r.Error != nil {
			failed.Add(1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.Dispatch(context.Background(), calls, emit)
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d calls failed", n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/call")
}

// BenchmarkDispatchOverBus measures one call and a batch of ten over an
// embedded NATS with an echo worker, with liveness on (the default) and
// off. Per call: ns/call; allocs/op and B/op are per batch.
func BenchmarkDispatchOverBus(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
		hb   time.Duration
	}{
		{"call", 1, aggregator.DefaultHeartbeat},
		{"batch10", 10, aggregator.DefaultHeartbeat},
		{"call/heartbeat-off", 1, 0},
		{"batch10/heartbeat-off", 10, 0},
	} {
		b.Run(bc.name, func(b *testing.B) { benchDispatch(b, bc.size, bc.hb) })
	}
}

// BenchmarkWaitingCallMemory measures what a call costs while it waits on
// its worker: one batch of 10,000 calls to a worker that takes them and
// never answers, heap and stacks read once every call has reached it,
// less what they were before; reported as B/waiting-call.
func BenchmarkWaitingCallMemory(b *testing.B) {
	const n = 10000
	ac, wc := benchBus(b)
	var got atomic.Int64
	all := make(chan struct{}, 1)
	sub, err := wc.Subscribe("toolbus.call.hold", func(*nats.Msg) {
		if got.Add(1)%n == 0 {
			all <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Unsubscribe() })
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		b.Fatal(err)
	}
	a, err := aggregator.New(ac, aggregator.WithLogger(quiet), aggregator.WithBatchConcurrency(n),
		aggregator.WithMaxInFlight(2*n), aggregator.WithDefaultTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	calls := make([]schema.Call, n)
	for i := range calls {
		calls[i] = schema.Call{Request: schema.Request{Method: "hold", ID: json.RawMessage(strconv.Itoa(i + 1))}}
	}
	var perCall float64
	for range b.N {
		before := inUse()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.Dispatch(ctx, calls, func(int, schema.Response) {})
		}()
		<-all
		perCall = float64(inUse()-before) / n
		cancel()
		<-done
	}
	b.ReportMetric(perCall, "B/waiting-call")
}

// inUse returns the bytes of heap objects and goroutine stacks in use
// after a collection.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}
