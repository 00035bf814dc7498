package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func TestResults(t *testing.T) {
	type point struct {
		X int `json:"x"`
		Y int `json:"y"`
	}
	var nilPoint *point
	tests := []struct {
		name   string
		result any
		want   string
	}{
		{"struct", point{1, 2}, `{"x":1,"y":2}`},
		{"nil", nil, `null`},
		{"typed nil pointer", nilPoint, `null`},
		{"string", "hi", `"hi"`},
		{"raw message unchanged", json.RawMessage(`{"b" : 1,  "a":[ 2 ]}`), `{"b" : 1,  "a":[ 2 ]}`},
		{"empty raw message", json.RawMessage(nil), `null`},
		{"big integer", json.RawMessage(`12345678901234567890`), `12345678901234567890`},
	}
	c := newCluster(t, bus.EmbeddedConfig{})
	for i, tc := range tests {
		if err := c.rt.HandleFunc(fmt.Sprintf("result.r%d", i), func(context.Context, *worker.Request) (any, error) {
			return tc.result, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.result(t, fmt.Sprintf("result.r%d", i), ""); got != tc.want {
				t.Errorf("result = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	business := &schema.Error{Code: 2001, Message: "insufficient funds", Data: json.RawMessage(`{"balance" : 3,"currency":"EUR"}`)}
	tests := []struct {
		name    string
		result  any
		err     error
		want    *schema.Error // compared by code, and by message and data when set
		wantMsg string        // a text the message must contain
		retry   bool          // data.retryable must be true
	}{
		{name: "business code passes through", err: business, want: business},
		{name: "wrapped business code", err: fmt.Errorf("charge card: %w", business), want: business},
		{name: "toolbus code", err: worker.InvalidParams("ms", "must not be negative"), want: schema.ErrInvalidParams},
		{name: "deadline", err: fmt.Errorf("query: %w", context.DeadlineExceeded), want: schema.ErrTimeout, retry: true},
		{name: "canceled", err: context.Canceled, want: schema.ErrCanceled},
		{name: "plain error", err: errors.New("disk full"), want: schema.ErrTool, wantMsg: "disk full"},
		{name: "error wins over result", result: "ignored", err: errors.New("broken"), want: schema.ErrTool, wantMsg: "broken"},
		{name: "nil *schema.Error", err: (*schema.Error)(nil), want: schema.ErrInternal},
		{name: "invalid error data keeps the code", err: &schema.Error{Code: 2002, Message: "bad", Data: json.RawMessage(`{"a":`)},
			want: &schema.Error{Code: 2002, Message: "bad", Data: json.RawMessage(`{"data_error":"the tool's error data is not valid JSON"}`)}},
		{name: "invalid raw result", result: json.RawMessage(`{"a":`), want: schema.ErrInternal},
		{name: "unencodable result", result: make(chan int), want: schema.ErrInternal},
	}
	c := newCluster(t, bus.EmbeddedConfig{})
	for i, tc := range tests {
		if err := c.rt.HandleFunc(fmt.Sprintf("errors.e%d", i), func(context.Context, *worker.Request) (any, error) {
			return tc.result, tc.err
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.rpcError(t, fmt.Sprintf("errors.e%d", i), "", time.Time{})
			if !errors.Is(got, tc.want) {
				t.Fatalf("error = %d %q, want code %d", got.Code, got.Message, tc.want.Code)
			}
			if tc.want.Data != nil && (got.Message != tc.want.Message || !bytes.Equal(got.Data, tc.want.Data)) {
				t.Errorf("error = %q %s, want %q %s", got.Message, got.Data, tc.want.Message, tc.want.Data)
			}
			if tc.wantMsg != "" && !strings.Contains(got.Message, tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", got.Message, tc.wantMsg)
			}
			if tc.retry {
				if r := dataMember(t, got, "retryable"); r != true {
					t.Errorf("data.retryable = %v, want true", r)
				}
			}
		})
	}
}

func TestTypedParams(t *testing.T) {
	type item struct {
		Name string `json:"name"`
		Note string `json:"note,omitempty"`
	}
	type params struct {
		MS    int             `json:"ms"`
		Label string          `json:"label,omitempty"`
		Items []item          `json:"items,omitempty"`
		Opt   *item           `json:"opt,omitempty"`
		Tags  map[string]item `json:"tags,omitzero"`
	}
	c := newCluster(t, bus.EmbeddedConfig{})
	err := c.rt.Handle("typed", worker.Typed(func(_ context.Context, p params) (params, error) {
		return p, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	c.start(t)

	for _, tc := range []struct {
		name, params, want string
	}{
		{"fits", `{"ms":5,"label":"x"}`, `{"ms":5,"label":"x"}`},
		{"optional members left out", `{"ms":0}`, `{"ms":0}`},
		{"nested required members present", `{"ms":1,"items":[{"name":"a"}],"opt":{"name":"b"},"tags":{"t":{"name":"c"}}}`,
			`{"ms":1,"items":[{"name":"a"}],"opt":{"name":"b"},"tags":{"t":{"name":"c"}}}`},
		{"a null pointer member", `{"ms":1,"opt":null}`, `{"ms":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.result(t, "typed", tc.params); got != tc.want {
				t.Errorf("typed(%s) = %s, want %s", tc.params, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name      string
		params    string
		wantField any // nil when no member can be named
	}{
		{"wrong type", `{"ms":"five"}`, "/ms"},
		{"nested wrong type", `{"ms":1,"opt":{"name":5}}`, "/opt/name"},
		{"unknown member", `{"ms":1,"bogus":true}`, "/bogus"},
		{"positional", `[1,"x"]`, nil},
		{"invalid JSON", `{"ms":`, nil},
		{"required member missing", `{"label":"x"}`, "/ms"},
		{"empty object", `{}`, "/ms"},
		{"absent params", "", "/ms"},
		{"null params", "null", "/ms"},
		{"required member of an element missing", `{"ms":1,"items":[{"name":"a"},{"note":"b"}]}`, "/items/1/name"},
		{"required member of a pointer missing", `{"ms":1,"opt":{}}`, "/opt/name"},
		{"required member of a map value missing", `{"ms":1,"tags":{"a/b":{}}}`, "/tags/a~1b/name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.rpcError(t, "typed", tc.params, time.Time{})
			if !errors.Is(got, schema.ErrInvalidParams) {
				t.Fatalf("error = %d %q, want %d", got.Code, got.Message, schema.CodeInvalidParams)
			}
			if f := dataMember(t, got, "field"); f != tc.wantField {
				t.Errorf("data.field = %v, want %v", f, tc.wantField)
			}
			if r := dataMember(t, got, "reason"); r == nil || r == "" {
				t.Errorf("data.reason = %v, want a reason", r)
			}
		})
	}
}

// TestInvalidParamsField checks that every error names its member as a
// JSON pointer, as the ingress's schema validation does.
func TestInvalidParamsField(t *testing.T) {
	tests := []struct {
		name, field string
		wantField   any // nil when the error names no member
		wantMsg     string
	}{
		{"bare name", "n", "/n", "invalid params: /n: must be positive"},
		{"pointer", "/items/0/n", "/items/0/n", "invalid params: /items/0/n: must be positive"},
		{"name with a slash and a tilde", "a/b~c", "/a~1b~0c", "invalid params: /a~1b~0c: must be positive"},
		{"no member", "", nil, "invalid params: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := worker.InvalidParams(tt.field, "must be positive")
			if !errors.Is(e, schema.ErrInvalidParams) {
				t.Fatalf("InvalidParams(%q) = %v, want -32602", tt.field, e)
			}
			if f := dataMember(t, e, "field"); f != tt.wantField || e.Message != tt.wantMsg {
				t.Errorf("InvalidParams(%q) = %q field %v, want %q field %v", tt.field, e.Message, f, tt.wantMsg, tt.wantField)
			}
		})
	}
}

func TestRequestFields(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := make(chan *worker.Request, 1)
	if err := c.rt.HandleFunc("fields", func(_ context.Context, req *worker.Request) (any, error) {
		got <- req
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	subject, _ := subjectOf(t, "fields")
	env := &schema.CallEnvelope{ID: []byte(`"abc"`), Method: "fields", Params: []byte(`[1, 2]`), Caller: "alice"}
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	msg, err := bus.CallMsg(subject, env, time.Time{}, traceparent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.send(msg); err != nil {
		t.Fatal(err)
	}
	req := <-got
	if string(req.ID) != `"abc"` || req.Method != "fields" || string(req.Params) != `[1, 2]` || req.Caller != "alice" {
		t.Errorf("request = id %s method %q params %s caller %q, want id \"abc\" method \"fields\" params [1, 2] caller \"alice\"",
			req.ID, req.Method, req.Params, req.Caller)
	}
	if req.IsNotification() {
		t.Errorf("IsNotification() = true, want false")
	}
	if !req.Deadline.IsZero() {
		t.Errorf("Deadline = %v, want zero", req.Deadline)
	}
	if tp := req.Header.Get(schema.HeaderTraceparent); tp != traceparent {
		t.Errorf("traceparent = %q, want %q", tp, traceparent)
	}
}

func subjectOf(t *testing.T, method string) (string, bus.Subjects) {
	t.Helper()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call(method)
	if err != nil {
		t.Fatal(err)
	}
	return subject, subjects
}

func TestPanic(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("panics", func(_ context.Context, req *worker.Request) (any, error) {
		if string(req.Params) == `{"panic":true}` {
			panic("tool bug")
		}
		return "fine", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	got := c.rpcError(t, "panics", `{"panic":true}`, time.Time{})
	if !errors.Is(got, schema.ErrInternal) {
		t.Fatalf("error = %d %q, want %d", got.Code, got.Message, schema.CodeInternal)
	}
	if strings.Contains(got.Message+string(got.Data), "goroutine") || strings.Contains(got.Message+string(got.Data), ".go:") {
		t.Errorf("error = %q %s, want no stack in the reply", got.Message, got.Data)
	}
	if logs := c.logs.String(); !strings.Contains(logs, "tool bug") || !strings.Contains(logs, "goroutine") {
		t.Errorf("logs = %q, want the panic and its stack", logs)
	}
	if r := c.result(t, "panics", `{}`); r != `"fine"` {
		t.Errorf("result after panic = %s, want \"fine\"", r)
	}
}

func TestDeadline(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	var runs atomic.Int64
	if err := c.rt.HandleFunc("deadline", func(ctx context.Context, req *worker.Request) (any, error) {
		runs.Add(1)
		d, ok := ctx.Deadline()
		if !ok {
			return nil, nil
		}
		if !d.Equal(req.Deadline) {
			return nil, fmt.Errorf("ctx deadline %v, request deadline %v", d, req.Deadline)
		}
		return d.UnixNano(), nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	t.Run("reaches the handler's context", func(t *testing.T) {
		deadline := time.Now().Add(time.Minute)
		if got, want := c.result2(t, "deadline", deadline), fmt.Sprint(deadline.UnixNano()); got != want {
			t.Errorf("handler's deadline = %s, want %s", got, want)
		}
	})
	t.Run("none", func(t *testing.T) {
		if got := c.result(t, "deadline", ""); got != "null" {
			t.Errorf("handler's deadline = %s, want none", got)
		}
	})
	t.Run("late call skipped", func(t *testing.T) {
		before := runs.Load()
		// The late call's reply, if any were sent, would reach the inbox
		// before the answer to the call sent after it: both come from the
		// same subscription in order over the same connections.
		inbox := c.caller.NewRespInbox()
		sub, err := c.caller.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		late := callMsg(t, "deadline", "", time.Now().Add(-time.Second))
		late.Reply = inbox
		if err := c.caller.PublishMsg(late); err != nil {
			t.Fatal(err)
		}
		c.result(t, "deadline", "")
		if n, _, _ := sub.Pending(); n != 0 {
			t.Errorf("late call got %d replies, want none", n)
		}
		if got := runs.Load() - before; got != 1 {
			t.Errorf("handler ran %d times, want once (only the call in time)", got)
		}
		if !strings.Contains(c.logs.String(), "past its deadline") {
			t.Errorf("logs do not mention the skipped call")
		}
	})
}

func (c *cluster) result2(t *testing.T, method string, deadline time.Time) string {
	t.Helper()
	r, err := c.call(t, method, "", deadline)
	if err != nil {
		t.Fatalf("call %s: %v", method, err)
	}
	if e := r.Err(); e != nil {
		t.Fatalf("call %s = error %d %q, want a result", method, e.Code, e.Message)
	}
	return string(r.Result)
}

// gate is a handler that holds every call until released and counts how
// many run at once.
type gate struct {
	active, peak atomic.Int64
	started      chan struct{}
	release      chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (g *gate) ServeCall(ctx context.Context, _ *worker.Request) (any, error) {
	n := g.active.Add(1)
	defer g.active.Add(-1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	g.started <- struct{}{}
	select {
	case <-g.release:
		return "done", nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestConcurrencyLimit(t *testing.T) {
	const limit, calls = 3, 10
	c := newCluster(t, bus.EmbeddedConfig{})
	g := newGate()
	if err := c.rt.Handle("gated", g, worker.Concurrency(limit)); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	var wg sync.WaitGroup
	results := make(chan string, calls)
	for range calls {
		wg.Go(func() {
			r, err := c.call(t, "gated", "", time.Time{})
			switch {
			case err != nil:
				results <- err.Error()
			case r.Err() != nil:
				results <- r.Err().Message
			default:
				results <- string(r.Result)
			}
		})
	}
	for range limit {
		<-g.started
	}
	// Give further calls a chance to start if the limit were not enforced;
	// on a slow machine this can only hide a bug, never fail a correct
	// runtime.
	time.Sleep(100 * time.Millisecond)
	if n := g.active.Load(); n != limit {
		t.Errorf("%d handlers running, want %d", n, limit)
	}
	close(g.release)
	wg.Wait()
	close(results)
	for r := range results {
		if r != `"done"` {
			t.Errorf("result = %s, want \"done\"", r)
		}
	}
	if p := g.peak.Load(); p != limit {
		t.Errorf("at most %d handlers ran at once, want %d", p, limit)
	}
}

func TestWaitingCallHonoursDeadline(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	g := newGate()
	if err := c.rt.Handle("gated", g, worker.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	first := make(chan error, 1)
	go func() {
		_, err := c.call(t, "gated", "", time.Time{})
		first <- err
	}()
	<-g.started
	got := c.rpcError(t, "gated", "", time.Now().Add(200*time.Millisecond))
	if !errors.Is(got, schema.ErrTimeout) {
		t.Errorf("waiting call = %d %q, want %d", got.Code, got.Message, schema.CodeTimeout)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
}

func TestManyConcurrentSleeps(t *testing.T) {
	const calls, sleep = 256, 200 * time.Millisecond
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("sleep", func(ctx context.Context, _ *worker.Request) (any, error) {
		select {
		case <-time.After(sleep):
			return "slept", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	start := time.Now()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range calls {
		wg.Go(func() {
			r, err := c.call(t, "sleep", "", time.Now().Add(time.Minute))
			if err == nil && r.Err() == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := ok.Load(); n != calls {
		t.Errorf("%d of %d calls answered a result", n, calls)
	}
	// One after the other they would take 256 sleeps; the bound is about
	// concurrency, not speed, so it is generous.
	if d := time.Since(start); d > 20*sleep {
		t.Errorf("%d concurrent sleeps took %v, want about one sleep (%v)", calls, d, sleep)
	}
}

func TestNotification(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	got := make(chan *worker.Request, 2)
	if err := c.rt.HandleFunc("notify", func(_ context.Context, req *worker.Request) (any, error) {
		got <- req
		return nil, errors.New("nobody hears this")
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	subject, _ := subjectOf(t, "notify")
	msg, err := bus.CallMsg(subject, &schema.CallEnvelope{Method: "notify", Params: []byte(`[7]`)}, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.caller.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	req := <-got
	if !req.IsNotification() || string(req.Params) != `[7]` {
		t.Errorf("request = notification %v params %s, want a notification with [7]", req.IsNotification(), req.Params)
	}
}

func TestPatterns(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	method := func(_ context.Context, req *worker.Request) (any, error) { return req.Method, nil }
	for _, p := range []string{"math.*", "files.>"} {
		if err := c.rt.HandleFunc(p, method); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	for _, m := range []string{"math.add", "math.sub", "files.read", "files.dir.list"} {
		t.Run(m, func(t *testing.T) {
			if got, want := c.result(t, m, ""), `"`+m+`"`; got != want {
				t.Errorf("Method = %s, want %s", got, want)
			}
		})
	}
	for _, m := range []string{"math", "math.add.int", "files"} {
		t.Run(m+" is not served", func(t *testing.T) {
			if _, err := c.call(t, m, "", time.Time{}); !errors.Is(err, bus.ErrNoResponders) {
				t.Errorf("call %s: err = %v, want %v", m, err, bus.ErrNoResponders)
			}
		})
	}
	if got, want := fmt.Sprint(c.rt.Methods()), "[files.> math.*]"; got != want {
		t.Errorf("Methods() = %s, want %s", got, want)
	}
}

func TestResultLimit(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name    string
		cfg     bus.EmbeddedConfig
		opts    []worker.Option
		wantMax float64
	}{
		{"set", bus.EmbeddedConfig{}, []worker.Option{worker.WithMaxResultBytes(64)}, 64},
		{"from the server's max payload", bus.EmbeddedConfig{MaxPayload: 64 << 10}, nil, 64<<10 - worker.ResultHeadroom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.cfg, tc.opts...)
			if err := c.rt.HandleFunc("big", func(context.Context, *worker.Request) (any, error) {
				return big, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.rt.HandleFunc("small", func(context.Context, *worker.Request) (any, error) {
				return "ok", nil
			}); err != nil {
				t.Fatal(err)
			}
			c.start(t)
			got := c.rpcError(t, "big", "", time.Time{})
			if !errors.Is(got, schema.ErrLimitExceeded) {
				t.Fatalf("error = %d %q, want %d", got.Code, got.Message, schema.CodeLimitExceeded)
			}
			if l, m := dataMember(t, got, "limit"), dataMember(t, got, "max"); l != "max_result_bytes" || m != tc.wantMax {
				t.Errorf("data = %s, want limit max_result_bytes and max %v", got.Data, tc.wantMax)
			}
			if r := c.result(t, "small", ""); r != `"ok"` {
				t.Errorf("small result = %s, want \"ok\"", r)
			}
		})
	}
}

func TestUndecodableCall(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("tool", func(context.Context, *worker.Request) (any, error) {
		return "ok", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	subject, _ := subjectOf(t, "tool")
	wrongMethod := callMsg(t, "tool", "", time.Time{})
	data, err := schema.MarshalCall(&schema.CallEnvelope{ID: []byte("1"), Method: "other"})
	if err != nil {
		t.Fatal(err)
	}
	wrongMethod.Data = data
	badDeadline := callMsg(t, "tool", "", time.Time{})
	badDeadline.Header.Set(schema.HeaderDeadline, "soon")
	for _, tc := range []struct {
		name string
		msg  *nats.Msg
	}{
		{"not msgpack", &nats.Msg{Subject: subject, Data: []byte("garbage")}},
		{"empty", &nats.Msg{Subject: subject}},
		{"method does not match subject", wrongMethod},
		{"invalid deadline header", badDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.send(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Err(); !errors.Is(got, schema.ErrInvalidRequest) {
				t.Errorf("reply = %v, want error %d", got, schema.CodeInvalidRequest)
			}
		})
	}
	t.Run("without reply subject", func(t *testing.T) {
		if err := c.caller.Publish(subject, []byte("garbage")); err != nil {
			t.Fatal(err)
		}
		if r := c.result(t, "tool", ""); r != `"ok"` {
			t.Errorf("next result = %s, want \"ok\"", r)
		}
	})
	if !strings.Contains(c.logs.String(), "undecodable call") {
		t.Errorf("logs do not mention the undecodable calls")
	}
}

func TestShutdownDrains(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	g := newGate()
	if err := c.rt.Handle("gated", g); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	inFlight := make(chan string, 1)
	go func() {
		r, err := c.call(t, "gated", "", time.Time{})
		switch {
		case err != nil:
			inFlight <- err.Error()
		case r.Err() != nil:
			inFlight <- r.Err().Message
		default:
			inFlight <- string(r.Result)
		}
	}()
	<-g.started
	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown <- c.rt.Shutdown(ctx)
	}()
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v while a call was running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if r := <-inFlight; r != `"done"` {
		t.Errorf("in-flight call = %s, want \"done\"", r)
	}
	if _, err := c.call(t, "gated", "", time.Time{}); !errors.Is(err, bus.ErrNoResponders) {
		t.Errorf("call after Shutdown: err = %v, want %v", err, bus.ErrNoResponders)
	}
	if err := c.rt.HandleFunc("late", func(context.Context, *worker.Request) (any, error) { return nil, nil }); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Handle after Shutdown = %v, want %v", err, worker.ErrClosed)
	}
	if err := c.rt.Start(); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Start after Shutdown = %v, want %v", err, worker.ErrClosed)
	}
}

func TestShutdownTimeout(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	g := newGate()
	if err := c.rt.Handle("gated", g); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	inFlight := make(chan *schema.Error, 1)
	go func() {
		r, err := c.call(t, "gated", "", time.Time{})
		if err != nil {
			inFlight <- schema.ErrorFrom(err)
			return
		}
		inFlight <- r.Err()
	}()
	<-g.started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.rt.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want %v", err, context.DeadlineExceeded)
	}
	if got := <-inFlight; !errors.Is(got, schema.ErrUnavailable) {
		t.Errorf("in-flight call = %v, want error %d", got, schema.CodeUnavailable)
	}
}

func TestRegistration(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	noop := func(context.Context, *worker.Request) (any, error) { return "noop", nil }
	if err := c.rt.HandleFunc("math.*", noop); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		pattern string
		opts    []worker.HandleOption
		want    error // nil: any error
	}{
		{"same pattern", "math.*", nil, worker.ErrDuplicate},
		{"covered method", "math.add", nil, worker.ErrDuplicate},
		{"covering pattern", ">", nil, worker.ErrDuplicate},
		{"empty", "", nil, nil},
		{"wildcard inside a token", "ma*th", nil, nil},
		{"reserved", "rpc.discover", nil, nil},
		{"zero concurrency", "tool", []worker.HandleOption{worker.Concurrency(0)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.rt.HandleFunc(tc.pattern, noop, tc.opts...)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("HandleFunc(%q) = %v, want %v", tc.pattern, err, tc.want)
			}
		})
	}
	if err := c.rt.Handle("nil", nil); err == nil {
		t.Errorf("Handle with a nil handler = nil, want an error")
	}
	c.start(t)
	if err := c.rt.Start(); !errors.Is(err, worker.ErrStarted) {
		t.Errorf("second Start = %v, want %v", err, worker.ErrStarted)
	}
	if err := c.rt.HandleFunc("added.later", noop); err != nil {
		t.Fatalf("HandleFunc after Start: %v", err)
	}
	if r := c.result(t, "added.later", ""); r != `"noop"` {
		t.Errorf("result = %s, want \"noop\"", r)
	}
}

func TestNewOptions(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
		opt  worker.Option
	}{
		{"nil connection", nil, worker.WithConcurrency(1)},
		{"invalid prefix", nc, worker.WithPrefix("a.*")},
		{"zero subjects", nc, worker.WithSubjects(bus.Subjects{})},
		{"zero concurrency", nc, worker.WithConcurrency(0)},
		{"zero result bytes", nc, worker.WithMaxResultBytes(0)},
		{"nil logger", nc, worker.WithLogger(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := worker.New(tc.nc, tc.opt); err == nil {
				t.Errorf("New = nil error, want an error")
			}
		})
	}
	t.Run("prefix", func(t *testing.T) {
		rt, err := worker.New(nc, worker.WithPrefix("acme"))
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Shutdown(context.Background())
		if err := rt.HandleFunc("ping", func(context.Context, *worker.Request) (any, error) { return "pong", nil }); err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(); err != nil {
			t.Fatal(err)
		}
		data, err := schema.MarshalCall(&schema.CallEnvelope{ID: []byte("1"), Method: "ping"})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := nc.Request("acme.call.ping", data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r, err := bus.ReadReply(resp)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Result) != `"pong"` {
			t.Errorf("result = %s, want \"pong\"", r.Result)
		}
	})
}

func TestShutdownBeforeStart(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	if err := c.rt.HandleFunc("tool", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := c.rt.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown #%d = %v, want nil", i+1, err)
		}
	}
	if err := c.rt.Start(); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("Start after Shutdown = %v, want %v", err, worker.ErrClosed)
	}
}
