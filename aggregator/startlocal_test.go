package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

var _ aggregator.LocalStarter = (*startingLocal)(nil)

// A worker runtime of the same process, and the Deferred that stands for
// one, start calls without a goroutine waiting for each.
var (
	_ aggregator.LocalStarter = (*worker.Runtime)(nil)
	_ aggregator.LocalStarter = (*worker.Deferred)(nil)
)

// answerFunc is how a LocalStarter answers a call it started.
type answerFunc = func(json.RawMessage, *schema.Error)

// startingLocal is a fakeLocal that also starts calls
// ([aggregator.LocalStarter]): start decides whether it takes each call,
// and answers it at once, later through answer, or never. It records the
// ids of the calls it was asked to start, in order, and counts for each
// how often its stop was called.
type startingLocal struct {
	fakeLocal
	start func(c *schema.Call, deadline time.Time, answer answerFunc) bool

	smu     sync.Mutex
	starts  []string
	stopped map[string]int
}

func (s *startingLocal) StartLocal(c *schema.Call, deadline time.Time, answer answerFunc) (func(), bool) {
	id := string(c.ID)
	s.smu.Lock()
	s.starts = append(s.starts, id)
	s.smu.Unlock()
	if !s.start(c, deadline, answer) {
		return nil, false
	}
	return func() {
		s.smu.Lock()
		defer s.smu.Unlock()
		if s.stopped == nil {
			s.stopped = map[string]int{}
		}
		s.stopped[id]++
	}, true
}

// startsSeen returns the ids of the calls StartLocal was asked to start.
func (s *startingLocal) startsSeen() []string {
	s.smu.Lock()
	defer s.smu.Unlock()
	return slices.Clone(s.starts)
}

// stops returns how often the stop of the call of id was called.
func (s *startingLocal) stops(id string) int {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.stopped[id]
}

// neverTried is a try for a fake whose calls must all go to StartLocal:
// it answers an error the test reports.
func neverTried(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
	return nil, schema.NewError(schema.CodeInternal, "TryInvoke called", nil), true
}

// dispatchCounted runs calls through a and returns the last answer of
// each, and how many answers each got, counting any that comes after
// Dispatch returned.
func dispatchCounted(ctx context.Context, a *aggregator.Aggregator, calls []schema.Call) (got []schema.Response, answers func() []int) {
	var mu sync.Mutex
	got, n := make([]schema.Response, len(calls)), make([]int, len(calls))
	a.Dispatch(ctx, calls, func(i int, r schema.Response) {
		mu.Lock()
		defer mu.Unlock()
		got[i] = r
		n[i]++
	})
	return got, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(n)
	}
}

// TestStartLocalAnswers checks that a call the Local starts is answered
// once, with what its handler answered, whether the handler answers
// before StartLocal returns or later from a goroutine of its own; that
// TryInvoke is never offered it; and that StartLocal sees the call as
// the client sent it, under the call's deadline.
func TestStartLocalAnswers(t *testing.T) {
	ac, _ := setup(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	type offer struct {
		call     schema.Call
		deadline time.Time
	}
	var mu sync.Mutex
	offers := map[string]offer{}
	local := &startingLocal{fakeLocal: fakeLocal{try: neverTried}}
	local.start = func(c *schema.Call, deadline time.Time, answer answerFunc) bool {
		mu.Lock()
		offers[string(c.ID)] = offer{*c, deadline}
		mu.Unlock()
		if string(c.Params) == `"at once"` {
			answer(json.RawMessage(`{"by":"local","when":"at once"}`), nil)
			return true
		}
		wg.Go(func() { answer(json.RawMessage(`{"by":"local","when":"later"}`), nil) })
		return true
	}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	calls := []schema.Call{call(`"a-1"`, "echo", `"at once"`), call(`2`, "echo", `"later"`)}
	calls[0].Caller = "alice"
	// Within the aggregator's default timeout, which caps what a
	// client asks for.
	const timeout = 10 * time.Second
	calls[0].Timeout, calls[1].Timeout = timeout, timeout
	start := time.Now()
	got, answers := dispatchCounted(context.Background(), a, calls)
	end := time.Now()
	wg.Wait()
	for i, r := range got {
		var v struct{ By, When string }
		if err := json.Unmarshal(r.Result, &v); r.Error != nil || err != nil || v.By != "local" || `"`+v.When+`"` != string(calls[i].Params) {
			t.Errorf("call %s = %s %v, want the Local's answer %s", calls[i].ID, r.Result, r.Error, calls[i].Params)
		}
		if string(r.ID) != string(calls[i].ID) {
			t.Errorf("answer %d has id %s, want %s", i, r.ID, calls[i].ID)
		}
	}
	if n := answers(); !slices.Equal(n, []int{1, 1}) {
		t.Errorf("answers per call = %v, want one each", n)
	}
	if got := local.seen(); len(got) != 0 {
		t.Errorf("TryInvoke was offered %v, want nothing: the Local starts calls", got)
	}
	if got, want := local.startsSeen(), []string{`"a-1"`, `2`}; !slices.Equal(got, want) {
		t.Errorf("StartLocal was asked to start %v, want %v", got, want)
	}
	o := offers[`"a-1"`]
	if o.call.Method != "echo" || string(o.call.Params) != `"at once"` || o.call.Caller != "alice" {
		t.Errorf("StartLocal got method %q, params %s, caller %q; want the call as sent", o.call.Method, o.call.Params, o.call.Caller)
	}
	// The deadline is the call's timeout from the batch's start, which
	// falls between start and end.
	if o.deadline.Before(start.Add(timeout)) || o.deadline.After(end.Add(timeout)) {
		t.Errorf("StartLocal's deadline = %v, want %v from between %v and %v", o.deadline, timeout, start, end)
	}
}

// TestStartLocalDeclinedGoesOverTheBus checks that a call StartLocal
// declines is published and answered by a worker on the bus, without
// being offered to TryInvoke, and that no stop is called for it.
func TestStartLocalDeclinedGoesOverTheBus(t *testing.T) {
	ac, wc := setup(t)
	busWorker(t, wc)
	local := &startingLocal{fakeLocal: fakeLocal{try: neverTried}}
	local.start = func(*schema.Call, time.Time, answerFunc) bool { return false }
	a := newAgg(t, ac, aggregator.WithLocal(local))
	got, answers := dispatchCounted(context.Background(), a, []schema.Call{call(`7`, "echo", `[1]`)})
	if r := got[0]; r.Error != nil || answeredBy(r) != "bus" || string(r.ID) != "7" {
		t.Fatalf("declined call = id %s, %s %v; want id 7 answered by the bus worker", r.ID, r.Result, r.Error)
	}
	if n := answers(); n[0] != 1 {
		t.Errorf("declined call answered %d times, want once", n[0])
	}
	if got, want := local.startsSeen(), []string{"7"}; !slices.Equal(got, want) {
		t.Errorf("StartLocal was asked to start %v, want %v", got, want)
	}
	if got := local.seen(); len(got) != 0 {
		t.Errorf("TryInvoke was offered %v, want nothing: a declined call goes to the bus", got)
	}
	if n := local.stops("7"); n != 0 {
		t.Errorf("stop of the declined call called %d times, want never: it has none", n)
	}
}

// TestStartLocalDeadline checks that a call whose handler does not answer
// is answered by the aggregator at the call's deadline, -32001 without a
// reason, with its handler's context ended (stop called, once); and that
// the handler's answer, when it comes at last, answers nothing more.
func TestStartLocalDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	ac, _ := setup(t)
	held := make(chan answerFunc, 1)
	local := &startingLocal{fakeLocal: fakeLocal{try: neverTried}}
	local.start = func(_ *schema.Call, _ time.Time, answer answerFunc) bool {
		held <- answer
		return true
	}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	c := call(`1`, "hold", "")
	// The deadline is the event under test; its length only bounds how
	// long the test waits for it.
	c.Timeout = timeout
	var got []schema.Response
	var answers func() []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, answers = dispatchCounted(context.Background(), a, []schema.Call{c})
	}()
	arrive(t, done, "the call is answered at its deadline")
	r := got[0]
	if !errors.Is(r.Error, schema.ErrTimeout) {
		t.Fatalf("call = %s %v, want %d", r.Result, r.Error, schema.CodeTimeout)
	}
	if got := reason(t, r.Error); got != "" {
		t.Errorf("reason = %q, want none: the aggregator's own timeout", got)
	}
	if n := local.stops("1"); n != 1 {
		t.Errorf("stop called %d times, want once: the handler's context ends with the call", n)
	}
	answer := <-held
	answer(json.RawMessage(`"late"`), nil)
	if n := answers(); n[0] != 1 {
		t.Errorf("call answered %d times, want once: the late answer must be dropped", n[0])
	}
	if n := local.stops("1"); n != 1 {
		t.Errorf("stop called %d times after the late answer, want still once", n)
	}
}

// TestStartLocalBatchCanceled checks that a local call whose client
// leaves is answered canceled, with its handler's context ended (stop
// called, once), and that no cancel message goes on the bus for it: no
// worker has it. A call of the same batch on the bus, whose cancel
// message is announced, shows that the message would be seen.
func TestStartLocalBatchCanceled(t *testing.T) {
	ac, wc := setup(t)
	onBus := make(chan string, 1)
	sub, err := wc.QueueSubscribe("toolbus.call.hold", "toolbus-workers", func(m *nats.Msg) {
		onBus <- m.Header.Get(schema.HeaderCallID) // and no answer
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	cancels, err := wc.SubscribeSync("toolbus.cancel")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancels.Unsubscribe() })
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	started := make(chan answerFunc, 1)
	local := &startingLocal{fakeLocal: fakeLocal{try: neverTried}}
	local.start = func(c *schema.Call, _ time.Time, answer answerFunc) bool {
		if string(c.Params) != `"local"` {
			return false
		}
		started <- answer
		return true
	}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	calls := []schema.Call{call(`1`, "hold", `"local"`), call(`2`, "hold", `"bus"`)}
	for i := range calls {
		calls[i].Timeout = time.Hour
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var busCallID string
	go func() {
		<-started
		select {
		case busCallID = <-onBus:
			cancel()
		case <-ctx.Done(): // the test gave up
		}
	}()
	got, answers := dispatchCounted(ctx, a, calls)
	for i, r := range got {
		if !errors.Is(r.Error, schema.ErrCanceled) {
			t.Errorf("call %s = %s %v, want %d", calls[i].ID, r.Result, r.Error, schema.CodeCanceled)
		}
	}
	if n := answers(); !slices.Equal(n, []int{1, 1}) {
		t.Errorf("answers per call = %v, want one each", n)
	}
	if n := local.stops("1"); n != 1 {
		t.Errorf("stop of the local call called %d times, want once", n)
	}
	m, err := cancels.NextMsg(testwait.Limit)
	if err != nil {
		t.Fatalf("no cancel message for the call on the bus: %v", err)
	}
	if string(m.Data) != busCallID {
		t.Errorf("cancel names %q, want the bus call's id %q", m.Data, busCallID)
	}
	// Both cancel messages, had there been two, were published before
	// the batch was answered; the two flushes' round trips come after
	// them on the server and on the spy's connection.
	if err := ac.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if pending, _, err := cancels.Pending(); err != nil || pending != 0 {
		m, _ := cancels.NextMsg(0)
		t.Errorf("%d more cancel messages (%v), the first naming %q; want none for the local call", pending, err, m.Data)
	}
}

// TestStartLocalLeavesProgressAndAsk checks which calls StartLocal is
// not given: a call that reports progress goes to TryInvoke, which hands
// its reports on, and a call its caller can be asked on goes to a worker
// over the bus; a plain call of the same batch is started.
func TestStartLocalLeavesProgressAndAsk(t *testing.T) {
	ac, wc := setup(t)
	busWorker(t, wc)
	local := &startingLocal{fakeLocal: fakeLocal{try: func(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
		return json.RawMessage(`{"by":"TryInvoke"}`), nil, true
	}}}
	local.start = func(_ *schema.Call, _ time.Time, answer answerFunc) bool {
		answer(json.RawMessage(`{"by":"StartLocal"}`), nil)
		return true
	}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	calls := []schema.Call{call(`1`, "echo", `[1]`), call(`2`, "echo", `[2]`), call(`3`, "echo", `[3]`)}
	calls[1].Progress = func(float64, string) {}
	calls[2].Ask = func(schema.Question, func(schema.Answer) error) {}
	got, _ := dispatchCounted(context.Background(), a, calls)
	for i, want := range []string{"StartLocal", "TryInvoke", "bus"} {
		if r := got[i]; r.Error != nil || answeredBy(r) != want {
			t.Errorf("call %s = %s %v, want it answered by %s", calls[i].ID, r.Result, r.Error, want)
		}
	}
	if got, want := local.startsSeen(), []string{"1"}; !slices.Equal(got, want) {
		t.Errorf("StartLocal was asked to start %v, want %v", got, want)
	}
	if got, want := local.seen(), []string{"2"}; !slices.Equal(got, want) {
		t.Errorf("TryInvoke was offered %v, want %v", got, want)
	}
}
