package aggregator

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
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

// twoConns starts an embedded NATS server for the test and returns two
// connections to it, the aggregator's and the worker's, closed with the
// server when the test ends.
func twoConns(t *testing.T) (ac, wc *nats.Conn) {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	conns := make([]*nats.Conn, 2)
	for i := range conns {
		if conns[i], err = e.Connect(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conns[i].Close)
	}
	return conns[0], conns[1]
}

func manyCallsRandomWorker(t *testing.T, ackDelay time.Duration) {
	ac, wc := twoConns(t)

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

// handling is what [randomStarter] does with a call it is asked to
// start.
type handling int

const (
	answersAtOnce  handling = iota // before StartLocal returns
	answersLater                   // from a goroutine of its own
	answersTwice                   // "first", then "second", from a goroutine
	failsLater                     // an error, from a goroutine
	declines                       // takes nothing: the call goes to the bus
	neverAnswers                   // the deadline or the batch's end answers it
	answersStopped                 // an error once stopped, as a handler listening to its context
	handlings
)

// randomStarter is a [Local] and a [LocalStarter] that does with each
// call one of the handlings, drawn at random, and records which, and
// how often each call's stop was called. TryInvoke takes nothing, and
// counts the calls it was offered.
type randomStarter struct {
	handlers sync.WaitGroup // goroutines of the handlings that answer later
	tried    atomic.Int64

	mu    sync.Mutex
	how   map[string]handling
	stops map[string]int
}

var (
	_ Local        = (*randomStarter)(nil)
	_ LocalStarter = (*randomStarter)(nil)
)

func (r *randomStarter) TryInvoke(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
	r.tried.Add(1)
	return nil, nil, false
}

func (r *randomStarter) StartLocal(c *schema.Call, _ time.Time, answer func(json.RawMessage, *schema.Error)) (func(), bool) {
	id := string(c.ID)
	how := handling(rand.IntN(int(handlings)))
	r.mu.Lock()
	r.how[id] = how
	r.mu.Unlock()
	stop := func() {
		r.mu.Lock()
		r.stops[id]++
		r.mu.Unlock()
	}
	switch how {
	case answersAtOnce:
		answer(json.RawMessage(`"local"`), nil)
	case answersLater:
		r.handlers.Go(func() { answer(json.RawMessage(`"local"`), nil) })
	case answersTwice:
		r.handlers.Go(func() {
			answer(json.RawMessage(`"first"`), nil)
			answer(json.RawMessage(`"second"`), nil)
		})
	case failsLater:
		r.handlers.Go(func() { answer(nil, schema.NewError(2001, "tool failed", nil)) })
	case declines:
		return nil, false
	case answersStopped:
		counted := stop
		var once sync.Once
		stop = func() {
			counted()
			// Stop never waits: the handler returns on a goroutine
			// of its own.
			once.Do(func() {
				r.handlers.Go(func() { answer(nil, schema.NewError(schema.CodeToolError, "tool error: context canceled", nil)) })
			})
		}
	}
	return stop, true
}

// TestManyLocalCallsRandomHandler sends thousands of calls, in
// concurrent batches that hold few calls at once, to a Local that starts
// them and, at random, answers each at once, later, twice or with an
// error, declines it (a worker on the bus answers it), or never answers
// (its deadline of 50ms, or its batch given up on, answers it). Every
// call must be answered exactly once, with what was answered first; the
// stop of a call its handler never answered must be called exactly once,
// and no stop more than once; TryInvoke is never offered a call; and the
// table must be empty at the end. Run it with -race.
func TestManyLocalCallsRandomHandler(t *testing.T) {
	ac, wc := twoConns(t)
	sub, err := wc.QueueSubscribe("toolbus.call.>", "toolbus-workers", func(m *nats.Msg) {
		bus.Reply(m, schema.ReplyResult(json.RawMessage(`"bus"`)))
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

	local := &randomStarter{how: map[string]handling{}, stops: map[string]int{}}
	defer local.handlers.Wait()
	a, err := New(ac, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithLocal(local), WithBatchConcurrency(4))
	if err != nil {
		t.Fatal(err)
	}

	const senders, batches, size = 30, 10, 10
	var mu sync.Mutex
	results := map[string]schema.Response{}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for n := range batches {
				calls := make([]schema.Call, size)
				for i := range calls {
					calls[i] = schema.Call{Request: schema.Request{Method: "m",
						ID: json.RawMessage(strconv.Itoa(s*batches*size + n*size + i))}, Timeout: 50 * time.Millisecond}
				}
				ctx, cancel := context.WithCancel(context.Background())
				if n%5 == 4 {
					// Some batches are given up on while they run.
					defer time.AfterFunc(20*time.Millisecond, cancel).Stop()
				}
				got := make([]int, size)
				a.Dispatch(ctx, calls, func(i int, r schema.Response) {
					mu.Lock()
					got[i]++
					results[string(calls[i].ID)] = r
					mu.Unlock()
					if string(r.ID) != string(calls[i].ID) {
						t.Errorf("answer of call %s has id %s", calls[i].ID, r.ID)
					}
					if (r.Error == nil) == (r.Result == nil) {
						t.Errorf("answer of call %s = %+v, want a result or an error", calls[i].ID, r)
					}
				})
				cancel()
				mu.Lock()
				for i, n := range got {
					if n != 1 {
						t.Errorf("call %s answered %d times, want once", calls[i].ID, n)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if calls, timed := a.table.size(); calls != 0 || timed != 0 {
		t.Errorf("table holds %d calls and %d timers after every batch was answered, want none", calls, timed)
	}
	if n := local.tried.Load(); n != 0 {
		t.Errorf("TryInvoke was offered %d calls, want none: the Local starts them", n)
	}

	// What the handler answered first, unless the call's deadline or its
	// batch's end came before it.
	wants := map[handling]func(r schema.Response) bool{
		answersAtOnce:  func(r schema.Response) bool { return string(r.Result) == `"local"` },
		answersLater:   func(r schema.Response) bool { return string(r.Result) == `"local"` },
		answersTwice:   func(r schema.Response) bool { return string(r.Result) == `"first"` },
		failsLater:     func(r schema.Response) bool { return r.Error != nil && r.Error.Code == 2001 },
		declines:       func(r schema.Response) bool { return string(r.Result) == `"bus"` },
		neverAnswers:   func(schema.Response) bool { return false },
		answersStopped: func(schema.Response) bool { return false },
	}
	ended := func(r schema.Response) bool {
		return r.Error != nil && (r.Error.Code == schema.CodeTimeout || r.Error.Code == schema.CodeCanceled)
	}
	local.mu.Lock()
	for id, r := range results {
		how, started := local.how[id]
		switch {
		case !started && !ended(r):
			t.Errorf("call %s, never started, = %s %v; want a timeout or a cancel", id, r.Result, r.Error)
		case started && !wants[how](r) && !ended(r):
			// A call answered before StartLocal returned may still have
			// been ended first: its batch canceled, or its deadline come,
			// between its entry in the table and its answer.
			t.Errorf("call %s, handling %d, = %s %v; want its handler's first answer, a timeout or a cancel", id, how, r.Result, r.Error)
		}
	}
	if len(results) != senders*batches*size {
		t.Errorf("%d calls answered, want %d", len(results), senders*batches*size)
	}
	// Over a thousand calls started: a handling never drawn would mean
	// the test no longer tries what it says.
	drawn := map[handling]bool{}
	for _, how := range local.how {
		drawn[how] = true
	}
	if len(drawn) != int(handlings) {
		t.Errorf("handlings drawn %v, want all %d", drawn, handlings)
	}
	local.mu.Unlock()

	// A stop kept after the call was answered is called by whoever
	// started the call, which may be the timer's goroutine or a
	// handler's, after the batch was answered.
	stopped := func(id string, how handling) bool {
		n := local.stops[id]
		return n == 1 || n == 0 && how != neverAnswers && how != answersStopped
	}
	testwait.Eventually(t, func() bool {
		local.mu.Lock()
		defer local.mu.Unlock()
		for id, how := range local.how {
			if !stopped(id, how) {
				return false
			}
		}
		return true
	}, "every call its handler never answered has had its stop called")
	local.mu.Lock()
	defer local.mu.Unlock()
	for id, how := range local.how {
		if n := local.stops[id]; n > 1 || how == declines && n != 0 {
			t.Errorf("stop of call %s, handling %d, called %d times, want at most once, and never for a declined call", id, how, n)
		}
	}
}
