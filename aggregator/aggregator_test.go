package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup starts an embedded server and returns a connection for the
// aggregator and one for test responders.
func setup(t *testing.T) (aggConn, workerConn *nats.Conn) {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	for _, p := range []**nats.Conn{&aggConn, &workerConn} {
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		*p = nc
	}
	return aggConn, workerConn
}

// serve answers calls of method with fn, which returns a reply envelope (or
// nil to send no reply at all).
func serve(t *testing.T, nc *nats.Conn, method string, fn func(env *schema.CallEnvelope, deadline time.Time) *schema.ReplyEnvelope) {
	t.Helper()
	sub, err := nc.QueueSubscribe("toolbus.call."+method, "toolbus-workers", func(m *nats.Msg) {
		go func() {
			env, deadline, err := bus.ReadCall(m)
			if err != nil {
				bus.Reply(m, schema.ReplyError(schema.ErrorFrom(err)))
				return
			}
			if r := fn(env, deadline); r != nil {
				bus.Reply(m, r)
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func echo(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
	return schema.ReplyResult(env.Params)
}

func newAgg(t *testing.T, nc *nats.Conn, opts ...aggregator.Option) *aggregator.Aggregator {
	t.Helper()
	a, err := aggregator.New(nc, append([]aggregator.Option{aggregator.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func call(id, method, params string) schema.Call {
	c := schema.Call{Request: schema.Request{Method: method}}
	if id != "" {
		c.ID = json.RawMessage(id)
	}
	if params != "" {
		c.Params = json.RawMessage(params)
	}
	return c
}

func code(r schema.Response) int {
	if r.Error == nil {
		return 0
	}
	return r.Error.Code
}

func TestDispatchAnswersEveryCallInOrder(t *testing.T) {
	ac, wc := setup(t)
	serve(t, wc, "echo", echo)
	serve(t, wc, "fail", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		return schema.ReplyError(schema.NewError(2001, "business rule", json.RawMessage(`{"rule":7}`)))
	})
	serve(t, wc, "empty", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		return &schema.ReplyEnvelope{}
	})
	a := newAgg(t, ac)
	calls := []schema.Call{
		call(`"101"`, "echo", `{"a":1}`),
		call(`12345678901234567890`, "echo", `[1,2]`),
		call(`null`, "fail", `{}`),
		call(`3`, "nobody.serves.this", `{}`),
		call(`4`, "bad..name", `{}`),
		call(`5`, "rpc.internal", `{}`),
		call(`6`, "empty", `{}`),
		call(`"101"`, "echo", `{"dup":true}`),
	}
	got := schema.Collect(context.Background(), a, calls)
	if len(got) != len(calls) {
		t.Fatalf("Dispatch returned %d responses, want %d", len(got), len(calls))
	}
	for _, tc := range []struct {
		i      int
		code   int
		result string
	}{
		{0, 0, `{"a":1}`},
		{1, 0, `[1,2]`},
		{2, 2001, ""},
		{3, schema.CodeMethodNotFound, ""},
		{4, schema.CodeMethodNotFound, ""},
		{5, schema.CodeMethodNotFound, ""},
		{6, schema.CodeInternal, ""},
		{7, 0, `{"dup":true}`},
	} {
		r := got[tc.i]
		if string(r.ID) != string(calls[tc.i].ID) {
			t.Errorf("response %d id = %s, want %s", tc.i, r.ID, calls[tc.i].ID)
		}
		if code(r) != tc.code || string(r.Result) != tc.result {
			t.Errorf("response %d = (%s, %v), want (%s, code %d)", tc.i, r.Result, r.Error, tc.result, tc.code)
		}
	}
	if string(got[2].Error.Data) != `{"rule":7}` {
		t.Errorf("tool error data = %s, want passed through", got[2].Error.Data)
	}
}

func TestSlowCallTimesOutAlone(t *testing.T) {
	ac, wc := setup(t)
	serve(t, wc, "echo", echo)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	serve(t, wc, "hang", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		<-release
		return nil
	})
	a := newAgg(t, ac)
	calls := []schema.Call{call(`1`, "echo", `[1]`), call(`2`, "hang", `{}`), call(`3`, "echo", `[3]`)}
	calls[1].Timeout = 200 * time.Millisecond
	start := time.Now()
	got := schema.Collect(context.Background(), a, calls)
	elapsed := time.Since(start)
	if code(got[0]) != 0 || code(got[2]) != 0 {
		t.Fatalf("fast calls = %v, %v; want results", got[0].Error, got[2].Error)
	}
	if !errors.Is(got[1].Error, schema.ErrTimeout) {
		t.Fatalf("hung call error = %v, want timeout", got[1].Error)
	}
	var data struct {
		Retryable bool  `json:"retryable"`
		TimeoutMS int64 `json:"timeout_ms"`
	}
	if err := json.Unmarshal(got[1].Error.Data, &data); err != nil || !data.Retryable || data.TimeoutMS != 200 {
		t.Fatalf("timeout data = %s (%v), want retryable and timeout_ms 200", got[1].Error.Data, err)
	}
	if elapsed < 200*time.Millisecond || elapsed > 5*time.Second {
		t.Fatalf("Dispatch took %v, want about the 200ms deadline", elapsed)
	}
}

func TestDeadlineReachesWorker(t *testing.T) {
	ac, wc := setup(t)
	deadlines := make(chan time.Time, 1)
	serve(t, wc, "probe", func(env *schema.CallEnvelope, deadline time.Time) *schema.ReplyEnvelope {
		deadlines <- deadline
		return schema.ReplyResult([]byte(`true`))
	})
	a := newAgg(t, ac, aggregator.WithMethodTimeout("probe", 2*time.Second))
	start := time.Now()
	c := call(`1`, "probe", "")
	c.Timeout = time.Hour
	schema.Collect(context.Background(), a, []schema.Call{c})
	end := time.Now()
	d := <-deadlines
	if d.Before(start.Add(2*time.Second)) || d.After(end.Add(2*time.Second)) {
		t.Fatalf("worker saw deadline %v after start, want the method's 2s", d.Sub(start))
	}
}

// A context's deadline sooner than the method's reaches the worker to
// the nanosecond, as one read off the wire (no monotonic reading) does.
func TestContextDeadlineReachesWorker(t *testing.T) {
	ac, wc := setup(t)
	deadlines := make(chan time.Time, 1)
	serve(t, wc, "probe", func(env *schema.CallEnvelope, deadline time.Time) *schema.ReplyEnvelope {
		deadlines <- deadline
		return schema.ReplyResult([]byte(`true`))
	})
	a := newAgg(t, ac, aggregator.WithMethodTimeout("probe", time.Minute))
	want := time.Unix(0, time.Now().Add(30*time.Second).UnixNano()+7)
	ctx, cancel := context.WithDeadline(context.Background(), want)
	defer cancel()
	r := schema.Collect(ctx, a, []schema.Call{call(`1`, "probe", "")})[0]
	// The worker's handler sent the deadline before it replied, and the
	// call is answered: it is there, or the call never reached it.
	select {
	case d := <-deadlines:
		if d.UnixNano() != want.UnixNano() {
			t.Fatalf("worker saw deadline %d, want the context's %d", d.UnixNano(), want.UnixNano())
		}
	default:
		t.Fatalf("the call never reached the worker: answered %s %v", r.Result, r.Error)
	}
}

func TestTimeoutIsSmallestOfRequestMethodAndMax(t *testing.T) {
	ac, _ := setup(t)
	a := newAgg(t, ac,
		aggregator.WithDefaultTimeout(30*time.Second),
		aggregator.WithMaxTimeout(time.Minute),
		aggregator.WithMethodTimeout("slow", 10*time.Minute),
		aggregator.WithMethodTimeout("quick", time.Second))
	for _, tc := range []struct {
		name      string
		method    string
		requested time.Duration
		want      time.Duration
	}{
		{"default", "echo", 0, 30 * time.Second},
		{"client shorter", "echo", 300 * time.Millisecond, 300 * time.Millisecond},
		{"client longer than default", "echo", time.Hour, 30 * time.Second},
		{"method shorter", "quick", 0, time.Second},
		{"method over max", "slow", 0, time.Minute},
		{"client under method", "slow", 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Timeout(tc.method, tc.requested); got != tc.want {
				t.Fatalf("Timeout(%q, %v) = %v, want %v", tc.method, tc.requested, got, tc.want)
			}
		})
	}
}

func TestNotificationIsPublishedNotAwaited(t *testing.T) {
	ac, wc := setup(t)
	got := make(chan *schema.CallEnvelope, 1)
	serve(t, wc, "note", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		got <- env
		return nil
	})
	a := newAgg(t, ac)
	resps := schema.Collect(context.Background(), a, []schema.Call{call("", "note", `[1]`)})
	if len(resps) != 1 || resps[0].Error != nil || resps[0].Result != nil {
		t.Fatalf("notification response = %+v, want zero", resps)
	}
	select {
	case env := <-got:
		if env.ID != nil || string(env.Params) != "[1]" {
			t.Fatalf("worker got id %s params %s, want no id and [1]", env.ID, env.Params)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("notification never reached the worker")
	}
}

func TestBatchConcurrencyCap(t *testing.T) {
	ac, wc := setup(t)
	var cur, peak atomic.Int32
	serve(t, wc, "sleep", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(30 * time.Millisecond)
		cur.Add(-1)
		return schema.ReplyResult([]byte(`null`))
	})
	a := newAgg(t, ac, aggregator.WithBatchConcurrency(2))
	calls := make([]schema.Call, 8)
	for i := range calls {
		calls[i] = call(`1`, "sleep", "")
	}
	for i, r := range schema.Collect(context.Background(), a, calls) {
		if r.Error != nil {
			t.Fatalf("call %d: %v", i, r.Error)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrency = %d, want 2", p)
	}
}

func TestMaxInFlightRefusesAtOnce(t *testing.T) {
	ac, wc := setup(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	serve(t, wc, "hold", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		started <- struct{}{}
		<-release
		return schema.ReplyResult([]byte(`1`))
	})
	a := newAgg(t, ac, aggregator.WithMaxInFlight(1))
	var wg sync.WaitGroup
	var first []schema.Response
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = schema.Collect(context.Background(), a, []schema.Call{call(`1`, "hold", "")})
	}()
	<-started
	second := schema.Collect(context.Background(), a, []schema.Call{call(`2`, "hold", "")})
	close(release)
	wg.Wait()
	if first[0].Error != nil {
		t.Fatalf("first call = %v, want result", first[0].Error)
	}
	if !errors.Is(second[0].Error, schema.ErrOverloaded) {
		t.Fatalf("second call = %v, want overloaded", second[0].Error)
	}
	var data struct {
		RetryAfter int64  `json:"retry_after_ms"`
		Limit      string `json:"limit"`
	}
	if err := json.Unmarshal(second[0].Error.Data, &data); err != nil || data.RetryAfter <= 0 || data.Limit != "max_in_flight" {
		t.Fatalf("overload data = %s, want retry_after_ms and limit", second[0].Error.Data)
	}
}

func TestCanceledContextAnswersCanceled(t *testing.T) {
	ac, wc := setup(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{}, 1)
	serve(t, wc, "hang", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		started <- struct{}{}
		<-release
		return nil
	})
	a := newAgg(t, ac)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	got := schema.Collect(ctx, a, []schema.Call{call(`1`, "hang", "")})
	if !errors.Is(got[0].Error, schema.ErrCanceled) {
		t.Fatalf("canceled call = %v, want canceled", got[0].Error)
	}
}

func TestStreamEmitsInCompletionOrder(t *testing.T) {
	ac, wc := setup(t)
	serve(t, wc, "sleep", func(env *schema.CallEnvelope, _ time.Time) *schema.ReplyEnvelope {
		var p struct{ MS int }
		json.Unmarshal(env.Params, &p)
		time.Sleep(time.Duration(p.MS) * time.Millisecond)
		return schema.ReplyResult(env.Params)
	})
	a := newAgg(t, ac)
	calls := []schema.Call{call(`1`, "sleep", `{"MS":400}`), call(`2`, "sleep", `{"MS":1}`)}
	var order []int
	a.Dispatch(context.Background(), calls, func(i int, r schema.Response) { order = append(order, i) })
	if len(order) != 2 || order[0] != 1 || order[1] != 0 {
		t.Fatalf("emit order = %v, want [1 0]", order)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	ac, _ := setup(t)
	for _, tc := range []struct {
		name string
		opt  aggregator.Option
	}{
		{"zero default timeout", aggregator.WithDefaultTimeout(0)},
		{"negative max timeout", aggregator.WithMaxTimeout(-time.Second)},
		{"wildcard method timeout", aggregator.WithMethodTimeout("a.*", time.Second)},
		{"zero batch concurrency", aggregator.WithBatchConcurrency(0)},
		{"zero max in flight", aggregator.WithMaxInFlight(0)},
		{"zero caller max in flight", aggregator.WithCallerMaxInFlight(0)},
		{"zero subjects", aggregator.WithSubjects(bus.Subjects{})},
		{"nil logger", aggregator.WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := aggregator.New(ac, tc.opt); err == nil {
				t.Fatal("New succeeded, want error")
			}
		})
	}
	if _, err := aggregator.New(nil); err == nil {
		t.Fatal("New(nil) succeeded, want error")
	}
}

func TestCancelIsAnnouncedToWorkers(t *testing.T) {
	ac, wc := setup(t)
	callIDs := make(chan string, 1)
	sub, err := wc.QueueSubscribe("toolbus.call.hang", "toolbus-workers", func(m *nats.Msg) {
		callIDs <- m.Header.Get(schema.HeaderCallID)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cancels, err := wc.SubscribeSync("toolbus.cancel")
	if err != nil {
		t.Fatal(err)
	}
	defer cancels.Unsubscribe()
	wc.Flush()
	a := newAgg(t, ac)
	ctx, cancel := context.WithCancel(context.Background())
	var callID string
	go func() {
		callID = <-callIDs
		cancel()
	}()
	got := schema.Collect(ctx, a, []schema.Call{call(`1`, "hang", "")})
	if !errors.Is(got[0].Error, schema.ErrCanceled) {
		t.Fatalf("call = %v, want canceled", got[0].Error)
	}
	m, err := cancels.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no cancel message: %v", err)
	}
	if callID == "" || string(m.Data) != callID {
		t.Fatalf("cancel names %q, want the call's id %q", m.Data, callID)
	}
}

func TestTimeoutIsNotAnnouncedAsCancel(t *testing.T) {
	ac, wc := setup(t)
	serve(t, wc, "hang", func(*schema.CallEnvelope, time.Time) *schema.ReplyEnvelope { return nil })
	cancels, err := wc.SubscribeSync("toolbus.cancel")
	if err != nil {
		t.Fatal(err)
	}
	defer cancels.Unsubscribe()
	wc.Flush()
	a := newAgg(t, ac)
	c := call(`1`, "hang", "")
	c.Timeout = 50 * time.Millisecond
	if got := schema.Collect(context.Background(), a, []schema.Call{c}); !errors.Is(got[0].Error, schema.ErrTimeout) {
		t.Fatalf("call = %v, want timeout", got[0].Error)
	}
	if m, err := cancels.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a timed-out call sent cancel %q; the worker has the deadline already", m.Data)
	}
}

// TestBadReplyHidesTheBus: a worker that answers bytes that are no reply
// envelope gets its call answered -32603 bad_reply, whose text names the
// method and the fault but no subject of the bus.
func TestBadReplyHidesTheBus(t *testing.T) {
	ac, wc := setup(t)
	sub, err := wc.QueueSubscribe("toolbus.call.broken", "toolbus-workers", func(m *nats.Msg) { m.Respond([]byte("not msgpack")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*aggregator.Aggregator{newAgg(t, ac), newAgg(t, ac, aggregator.WithHeartbeat(0, 1))} {
		r := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "broken", "")})[0]
		if r.Error == nil || r.Error.Code != schema.CodeInternal || r.Error.Reason() != schema.ReasonBadReply {
			t.Fatalf("broken worker = %s %v, want -32603 bad_reply", r.Result, r.Error)
		}
		if strings.Contains(r.Error.Message, "_INBOX") || !strings.Contains(r.Error.Message, "broken") {
			t.Errorf("message %q, want the method named and no inbox subject", r.Error.Message)
		}
	}
}

// idemStore is the option of an idempotency store open on kv, closed when
// the test ends (before its connections, which close later), so that its
// watch of the records ends with the test.
func idemStore(t *testing.T, kv jetstream.KeyValue) aggregator.Option {
	t.Helper()
	s := &aggregator.IdempotencyStore{}
	s.Open(kv)
	t.Cleanup(s.Close)
	return aggregator.WithIdempotencyStore(s)
}
