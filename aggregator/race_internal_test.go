package aggregator

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// TestManyCallsRandomWorker sends thousands of calls, in concurrent
// batches, to a worker that does with each what a worker may: answers at
// once, acknowledges and beats before answering, answers twice, refuses
// busy, acknowledges and falls silent, or says nothing at all; with the
// ack asked for at once, and allowed to be held back, so that silent
// calls are also lost for want of an ack. Every call must be answered
// exactly once, and the table must be empty at the end. Run it with
// -race.
func TestManyCallsRandomWorker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ackDelay time.Duration
	}{
		{name: "ack at once"},
		{name: "ack held back", ackDelay: 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { manyCallsRandomWorker(t, tc.ackDelay) })
	}
}

func manyCallsRandomWorker(t *testing.T, ackDelay time.Duration) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	conns := make([]*nats.Conn, 2)
	for i := range conns {
		if conns[i], err = e.Connect(); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	ac, wc := conns[0], conns[1]

	var pending sync.WaitGroup // the worker's delayed messages
	defer pending.Wait()
	later := func(d time.Duration, f func()) {
		pending.Add(1)
		time.AfterFunc(d, func() {
			defer pending.Done()
			f()
		})
	}
	progress := func(m *nats.Msg, v string) {
		wc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{schema.HeaderProgress: []string{v}}})
	}
	answer := func(m *nats.Msg) { bus.Reply(m, schema.ReplyResult(json.RawMessage(`"ok"`))) }
	sub, err := wc.QueueSubscribe("toolbus.call.>", "toolbus-workers", func(m *nats.Msg) {
		switch rand.IntN(7) {
		case 0:
			answer(m)
		case 1:
			progress(m, schema.ProgressAck)
			later(10*time.Millisecond, func() {
				progress(m, schema.ProgressBeat)
				answer(m)
			})
		case 2:
			answer(m)
			answer(m)
		case 3:
			progress(m, schema.ProgressBusy)
		case 4:
			progress(m, schema.ProgressAck)
			later(time.Millisecond, func() { answer(m); progress(m, schema.ProgressBeat) })
		case 5:
			progress(m, schema.ProgressAck) // and silence
		default:
			// nothing: an old worker that lost the call
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}

	a, err := New(ac, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithHeartbeat(20*time.Millisecond, 2), WithAckTimeout(60*time.Millisecond), WithBusyWait(100*time.Millisecond),
		WithDefaultTimeout(400*time.Millisecond), WithRetrySafe("safe.>"), WithHedge(30*time.Millisecond),
		WithBatchConcurrency(4), WithAckDelay(ackDelay))
	if err != nil {
		t.Fatal(err)
	}

	const senders, batches, size = 20, 10, 10
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for n := range batches {
				calls := make([]schema.Call, size)
				for i := range calls {
					method := "plain.m"
					if i%2 == 0 {
						method = "safe.m"
					}
					calls[i] = schema.Call{Request: schema.Request{Method: method,
						ID: json.RawMessage(strconv.Itoa(s*batches*size + n*size + i))}}
				}
				ctx, cancel := context.WithCancel(context.Background())
				if n%5 == 4 {
					// Some batches are given up on while they run.
					time.AfterFunc(50*time.Millisecond, cancel)
				}
				var mu sync.Mutex
				got := make([]int, size)
				a.Dispatch(ctx, calls, func(i int, r schema.Response) {
					mu.Lock()
					got[i]++
					mu.Unlock()
					if string(r.ID) != string(calls[i].ID) {
						t.Errorf("answer of call %s has id %s", calls[i].ID, r.ID)
					}
					if (r.Error == nil) == (r.Result == nil) {
						t.Errorf("answer of call %s = %+v, want a result or an error", calls[i].ID, r)
					}
				})
				cancel()
				for i, n := range got {
					if n != 1 {
						t.Errorf("call %s answered %d times, want once", calls[i].ID, n)
					}
				}
			}
		})
	}
	wg.Wait()
	if calls, timed := a.table.size(); calls != 0 || timed != 0 {
		t.Errorf("table holds %d calls and %d timers after every batch was answered, want none", calls, timed)
	}
}
