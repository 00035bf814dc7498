package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

var _ aggregator.Local = (*fakeLocal)(nil)

// A worker runtime of the same process is what the aggregator is meant to
// be given.
var _ aggregator.Local = (*worker.Runtime)(nil)

// fakeLocal is an [aggregator.Local] that hands every call to try and
// records the ids of the calls it was offered, in order.
type fakeLocal struct {
	try func(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool)

	mu      sync.Mutex
	offered []string
}

func (f *fakeLocal) TryInvoke(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
	f.mu.Lock()
	f.offered = append(f.offered, string(c.ID))
	f.mu.Unlock()
	return f.try(ctx, c)
}

// seen returns the ids of the calls offered so far.
func (f *fakeLocal) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.offered)
}

// declines is a try that takes no call.
func declines(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
	return nil, nil, false
}

// busWorker starts a worker runtime on nc that answers calls of echo with
// {"by":"bus","params":...}, shut down when the test ends.
func busWorker(t *testing.T, nc *nats.Conn) {
	t.Helper()
	rt, err := worker.New(nc, worker.WithLogger(quiet), worker.WithoutStatus())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) {
		return map[string]any{"by": "bus", "params": req.Params}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// arrive waits for a value on ch. It fails the test when none comes within
// [testwait.Limit], a bound on a hang and not a timing goal.
func arrive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting until %s (%v)", what, testwait.Limit)
	}
}

// answeredBy returns the "by" member of a result, "" when it has none.
func answeredBy(r schema.Response) string {
	var v struct {
		By string `json:"by"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &v) != nil {
		return ""
	}
	return v.By
}

// TestLocalAnswersWithoutTheBus checks that a call the Local takes is
// answered by it, with nothing on the bus to answer it, and that the Local
// sees the call as the client sent it, under the call's deadline.
func TestLocalAnswersWithoutTheBus(t *testing.T) {
	ac, _ := setup(t)
	type offer struct {
		call     schema.Call
		deadline time.Time
		has      bool
	}
	offers := make(chan offer, 1)
	local := &fakeLocal{try: func(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
		d, has := ctx.Deadline()
		offers <- offer{*c, d, has}
		return json.RawMessage(`{"by":"local"}`), nil, true
	}}
	c := call(`"a-1"`, "echo", `{"x":1}`)
	c.Caller = "alice"
	c.Timeout = time.Hour

	// The same call without the Local shows that no worker serves echo.
	if r := schema.Collect(context.Background(), newAgg(t, ac), []schema.Call{c})[0]; !errors.Is(r.Error, schema.ErrMethodNotFound) {
		t.Fatalf("echo without a Local = %s %v, want %d: no worker is on the bus", r.Result, r.Error, schema.CodeMethodNotFound)
	}

	a := newAgg(t, ac, aggregator.WithLocal(local), aggregator.WithDefaultTimeout(time.Minute))
	start := time.Now()
	r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
	if r.Error != nil || string(r.Result) != `{"by":"local"}` || string(r.ID) != `"a-1"` {
		t.Fatalf("echo with a Local = id %s, %s %v; want id \"a-1\" and the Local's result", r.ID, r.Result, r.Error)
	}
	o := <-offers
	if string(o.call.ID) != `"a-1"` || o.call.Method != "echo" || string(o.call.Params) != `{"x":1}` || o.call.Caller != "alice" {
		t.Errorf("Local got id %s, method %q, params %s, caller %q; want the call as sent", o.call.ID, o.call.Method, o.call.Params, o.call.Caller)
	}
	// The call's deadline is the aggregator's: the default timeout, as
	// the client asked for more. The bounds are a minute wide.
	if !o.has || o.deadline.Before(start.Add(time.Minute)) || o.deadline.After(time.Now().Add(time.Minute)) {
		t.Errorf("Local's context deadline = %v (set %v), want the call's minute from %v", o.deadline, o.has, start)
	}
}

// TestLocalDeclinedGoesOverTheBus checks that a call the Local declines is
// published as usual and answered by a worker on the bus.
func TestLocalDeclinedGoesOverTheBus(t *testing.T) {
	ac, wc := setup(t)
	busWorker(t, wc)
	local := &fakeLocal{try: declines}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	r := schema.Collect(context.Background(), a, []schema.Call{call(`7`, "echo", `[1]`)})[0]
	if r.Error != nil || answeredBy(r) != "bus" || string(r.ID) != "7" {
		t.Fatalf("declined call = id %s, %s %v; want id 7 answered by the bus worker", r.ID, r.Result, r.Error)
	}
	if got, want := local.seen(), []string{"7"}; !slices.Equal(got, want) {
		t.Errorf("Local was offered %v, want %v", got, want)
	}
}

// TestAskableCallGoesOverTheBus: a call its caller can be asked on (a
// job's) is never offered to the Local, which could not carry a question:
// it goes to a worker over the bus.
func TestAskableCallGoesOverTheBus(t *testing.T) {
	ac, wc := setup(t)
	busWorker(t, wc)
	local := &fakeLocal{try: func(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
		return json.RawMessage(`"local"`), nil, true
	}}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	c := call(`8`, "echo", `[1]`)
	c.Ask = func(schema.Question, func(schema.Answer) error) {}
	r := schema.Collect(context.Background(), a, []schema.Call{c})[0]
	if r.Error != nil || answeredBy(r) != "bus" {
		t.Fatalf("askable call = %s %v; want it answered by the bus worker", r.Result, r.Error)
	}
	if got := local.seen(); len(got) != 0 {
		t.Errorf("Local was offered %v, want none", got)
	}
}

// TestLocalComesAfterAdmission checks that a call refused by the
// aggregator's own limits is never offered to the Local: the limits hold
// for local calls as for calls over the bus.
func TestLocalComesAfterAdmission(t *testing.T) {
	tests := []struct {
		name   string
		opts   []aggregator.Option
		caller string
		limit  string
	}{
		{name: "max in flight", opts: []aggregator.Option{aggregator.WithMaxInFlight(1)}, limit: "max_in_flight"},
		{name: "caller max in flight", opts: []aggregator.Option{aggregator.WithCallerMaxInFlight(1)}, caller: "alice", limit: "caller_max_in_flight"},
		{name: "method max in flight", opts: []aggregator.Option{aggregator.WithMethodMaxInFlight("hold", 1)}, limit: "method_max_in_flight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, _ := setup(t)
			started, release := make(chan struct{}, 1), make(chan struct{})
			// The Local holds the first call and answers any other at once,
			// so that a call wrongly let through is answered, not stuck.
			local := &fakeLocal{try: func(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
				if string(c.ID) != "1" {
					return json.RawMessage(`"let through"`), nil, true
				}
				started <- struct{}{}
				<-release
				return json.RawMessage(`"held"`), nil, true
			}}
			a := newAgg(t, ac, append([]aggregator.Option{aggregator.WithLocal(local)}, tc.opts...)...)
			first, second := call(`1`, "hold", ""), call(`2`, "hold", "")
			first.Caller, second.Caller = tc.caller, tc.caller
			held := make(chan schema.Response, 1)
			go func() { held <- schema.Collect(context.Background(), a, []schema.Call{first})[0] }()
			arrive(t, started, "the Local has the first call")
			r := schema.Collect(context.Background(), a, []schema.Call{second})[0]
			close(release)
			if !errors.Is(r.Error, schema.ErrOverloaded) {
				t.Fatalf("second call = %s %v, want %d", r.Result, r.Error, schema.CodeOverloaded)
			}
			var data struct {
				Limit string `json:"limit"`
			}
			if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.Limit != tc.limit {
				t.Errorf("overload data = %s, want limit %q", r.Error.Data, tc.limit)
			}
			if h := <-held; h.Error != nil || string(h.Result) != `"held"` {
				t.Errorf("first call = %s %v, want the Local's \"held\"", h.Result, h.Error)
			}
			if got, want := local.seen(), []string{"1"}; !slices.Equal(got, want) {
				t.Errorf("Local was offered %v, want %v: the refused call must not reach it", got, want)
			}
		})
	}
}

// TestLocalBehindTheBreaker checks that what a Local answers counts for a
// method's circuit breaker, and that an open circuit keeps calls from the
// Local as from the bus.
func TestLocalBehindTheBreaker(t *testing.T) {
	ac, _ := setup(t)
	local := &fakeLocal{try: func(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
		return nil, schema.NewError(schema.CodeUnavailable, "unavailable", nil), true
	}}
	a := newAgg(t, ac, aggregator.WithLocal(local), aggregator.WithBreaker(aggregator.Breaker{Failures: 2, OpenFor: time.Hour}))
	for i, want := range []string{"", "", "circuit_open"} {
		r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "down", "")})[0]
		if !errors.Is(r.Error, schema.ErrUnavailable) || reason(t, r.Error) != want {
			t.Fatalf("call %d = %v, want %d with reason %q", i+1, r.Error, schema.CodeUnavailable, want)
		}
	}
	if got := len(local.seen()); got != 2 {
		t.Errorf("Local was offered %d calls, want 2: the open circuit answers the third", got)
	}
}

// TestLocalBatchConcurrency checks that the calls of a batch reach the
// Local no more at once than the batch's concurrency allows. As in
// TestBatchConcurrencyCap, a slow machine can only hide a breach of the
// cap, never fail an aggregator that keeps it.
func TestLocalBatchConcurrency(t *testing.T) {
	ac, _ := setup(t)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	local := &fakeLocal{try: func(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		started <- struct{}{}
		<-release
		return c.ID, nil, true
	}}
	a := newAgg(t, ac, aggregator.WithLocal(local), aggregator.WithBatchConcurrency(1))
	calls := []schema.Call{call(`1`, "hold", ""), call(`2`, "hold", ""), call(`3`, "hold", "")}
	done := make(chan []schema.Response, 1)
	go func() { done <- schema.Collect(context.Background(), a, calls) }()
	arrive(t, started, "the Local has a call of the batch")
	close(release)
	for i, r := range <-done {
		if r.Error != nil || string(r.Result) != string(calls[i].ID) {
			t.Errorf("call %s = %s %v, want its id as result", calls[i].ID, r.Result, r.Error)
		}
	}
	if p := peak.Load(); p != 1 {
		t.Errorf("the Local ran %d calls of one batch at once, want at most 1", p)
	}
}

// TestLocalErrorAfterContextEnded checks that an error a Local answers once
// the call's context has ended is replaced by the aggregator's own answer,
// as on the bus: its timeout, without a reason, for a deadline; a
// cancellation for a client that left.
func TestLocalErrorAfterContextEnded(t *testing.T) {
	const timeout = 20 * time.Millisecond
	tests := []struct {
		name string
		// localErr is what the Local answers once ctx has ended.
		localErr *schema.Error
		// cancel makes the client leave once the Local has the call; false
		// lets the call's deadline pass.
		cancel bool
		code   int
	}{
		{
			name: "deadline, the worker's timeout",
			localErr: schema.NewError(schema.CodeTimeout, "timed out: hold ran past its deadline",
				map[string]any{"retryable": true, "method": "hold", "reason": schema.ReasonDeadlineInWorker}),
			code: schema.CodeTimeout,
		},
		{
			name:     "deadline, a tool error",
			localErr: schema.NewError(schema.CodeToolError, "tool error: context deadline exceeded", nil),
			code:     schema.CodeTimeout,
		},
		{
			name:     "client left",
			localErr: schema.NewError(schema.CodeToolError, "tool error: context canceled", nil),
			cancel:   true,
			code:     schema.CodeCanceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac, _ := setup(t)
			started := make(chan struct{}, 1)
			local := &fakeLocal{try: func(ctx context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, tc.localErr, true
			}}
			a := newAgg(t, ac, aggregator.WithLocal(local))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := call(`1`, "hold", "")
			if tc.cancel {
				c.Timeout = time.Hour
				go func() { <-started; cancel() }()
			} else {
				// The deadline is the event under test; its length only
				// bounds how long the test waits for it.
				c.Timeout = timeout
			}
			r := schema.Collect(ctx, a, []schema.Call{c})[0]
			if code(r) != tc.code {
				t.Fatalf("call = %s %v, want code %d", r.Result, r.Error, tc.code)
			}
			if got := reason(t, r.Error); got != "" {
				t.Errorf("reason = %q, want none: the aggregator's own answer", got)
			}
			if tc.cancel {
				return
			}
			var data struct {
				TimeoutMS int64 `json:"timeout_ms"`
				Retryable bool  `json:"retryable"`
			}
			if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.TimeoutMS != timeout.Milliseconds() || !data.Retryable {
				t.Errorf("timeout data = %s, want retryable and timeout_ms %d", r.Error.Data, timeout.Milliseconds())
			}
		})
	}
}

// TestLocalBatch checks that in one batch the calls the Local takes and
// those it declines are all answered, each under its own id, by the Local
// or by the worker on the bus.
func TestLocalBatch(t *testing.T) {
	ac, wc := setup(t)
	busWorker(t, wc)
	// The Local takes the calls whose params are "local".
	local := &fakeLocal{try: func(_ context.Context, c *schema.Call) (json.RawMessage, *schema.Error, bool) {
		if string(c.Params) != `"local"` {
			return nil, nil, false
		}
		return json.RawMessage(`{"by":"local"}`), nil, true
	}}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	calls := []schema.Call{
		call(`1`, "echo", `"local"`),
		call(`"two"`, "echo", `"bus"`),
		call(`3`, "echo", `"local"`),
		call(`{"id":4}`, "echo", `"bus"`),
		call(`null`, "echo", `"local"`),
		call(`6`, "echo", `"bus"`),
	}
	got := schema.Collect(context.Background(), a, calls)
	if len(got) != len(calls) {
		t.Fatalf("batch of %d calls got %d answers", len(calls), len(got))
	}
	for i, r := range got {
		var want string
		json.Unmarshal(calls[i].Params, &want)
		if string(r.ID) != string(calls[i].ID) || answeredBy(r) != want {
			t.Errorf("answer %d = id %s, %s %v; want id %s answered by the %s", i, r.ID, r.Result, r.Error, calls[i].ID, want)
		}
	}
	if got := len(local.seen()); got != len(calls) {
		t.Errorf("Local was offered %d calls, want all %d", got, len(calls))
	}
}

// TestRuntimeAsLocal checks that a worker runtime given to the aggregator
// with WithLocal answers the calls it serves without a message on the bus.
// A subscriber outside the queue group sees every call published: it sees
// the call made through an aggregator without the runtime, and not the one
// made through the aggregator with it.
func TestRuntimeAsLocal(t *testing.T) {
	ac, wc := setup(t)
	rt, err := worker.New(wc, worker.WithLogger(quiet), worker.WithoutStatus())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil }); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call("echo")
	if err != nil {
		t.Fatal(err)
	}
	spy, err := wc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spy.Unsubscribe() })
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}

	withLocal := newAgg(t, ac, aggregator.WithLocal(rt))
	if r := schema.Collect(context.Background(), withLocal, []schema.Call{call(`"local"`, "echo", `[1]`)})[0]; r.Error != nil || string(r.Result) != `[1]` {
		t.Fatalf("echo with the runtime as Local = %s %v, want [1]", r.Result, r.Error)
	}
	overBus := newAgg(t, ac)
	if r := schema.Collect(context.Background(), overBus, []schema.Call{call(`"bus"`, "echo", `[2]`)})[0]; r.Error != nil || string(r.Result) != `[2]` {
		t.Fatalf("echo over the bus = %s %v, want [2]", r.Result, r.Error)
	}
	// A call published was routed to the spy before its worker could
	// answer it; the flush's round trip comes after it on the spy's
	// connection, so every call published is pending once it returns.
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	pending, _, err := spy.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range pending {
		m, err := spy.NextMsg(0)
		if err != nil {
			t.Fatalf("pending call on the bus: %v", err)
		}
		env, _, err := bus.ReadCall(m)
		if err != nil {
			t.Fatalf("call on the bus: %v", err)
		}
		ids = append(ids, string(env.ID))
	}
	// An aggregator may publish a call more than once (a retry), never a
	// call it ran locally.
	if slices.Contains(ids, `"local"`) || !slices.Contains(ids, `"bus"`) {
		t.Errorf("calls seen on the bus = %v, want the bus call's and not the local call's", ids)
	}
}

// TestLocalNeverSeesAnUncallableMethod: a name outside the method grammar
// and a reserved rpc.* name are refused -32601 before the Local is asked,
// as they are on the bus, even by a Local that would take any call.
func TestLocalNeverSeesAnUncallableMethod(t *testing.T) {
	ac, _ := setup(t)
	takesAll := func(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
		return json.RawMessage(`"ran"`), nil, true
	}
	local := &fakeLocal{try: takesAll}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	rs := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "rpc.discover", `{}`), call(`2`, "bad..name", `{}`)})
	for _, r := range rs {
		if r.Error == nil || r.Error.Code != schema.CodeMethodNotFound {
			t.Errorf("call %s = %s %v, want -32601", r.ID, r.Result, r.Error)
		}
	}
	if got := local.seen(); len(got) != 0 {
		t.Errorf("Local was offered %v, want nothing", got)
	}
}

// goingLocal is a fakeLocal that lends goroutines of its own
// ([aggregator.LocalGoroutines]) and counts the functions run on them.
type goingLocal struct {
	fakeLocal
	lent atomic.Int64
}

// Go runs f on a goroutine of the fake's own, counted.
func (g *goingLocal) Go(f func()) {
	g.lent.Add(1)
	go f()
}

// A worker runtime lends its runners.
var _ aggregator.LocalGoroutines = (*worker.Runtime)(nil)

// TestLocalWaitsOnLentGoroutines: when the Local lends goroutines, the
// aggregator waits for every local call on one of them, and the calls are
// answered as usual.
func TestLocalWaitsOnLentGoroutines(t *testing.T) {
	ac, _ := setup(t)
	local := &goingLocal{}
	local.try = func(context.Context, *schema.Call) (json.RawMessage, *schema.Error, bool) {
		return json.RawMessage(`"local"`), nil, true
	}
	a := newAgg(t, ac, aggregator.WithLocal(local))
	calls := []schema.Call{call(`1`, "echo", `[1]`), call(`2`, "echo", `[2]`), call(`3`, "echo", `[3]`)}
	for _, r := range schema.Collect(context.Background(), a, calls) {
		if r.Error != nil || string(r.Result) != `"local"` {
			t.Errorf("call %s = %s %v, want the Local's answer", r.ID, r.Result, r.Error)
		}
	}
	if n := local.lent.Load(); n != 3 {
		t.Errorf("local calls waited for on the Local's goroutines = %d, want all 3", n)
	}
}
