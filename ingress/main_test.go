package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeDispatcher answers per method, sequentially, and records what it was
// given. Methods:
//
//	echo                          result = params (null when absent)
//	subtract, sum, get_data       the JSON-RPC 2.0 specification's examples
//	notify_hello, notify_sum,
//	update                        result null (they arrive as notifications)
//	fail                          a tool's own error, code 2001 with data
//	block                         signals entered, then waits for release
//	                              or for its context to end
//	sleep {"ms"}                  answers {"slept_ms"} after ms, or the
//	                              context's error when it ends first
//	error {"code", "data"}        an error with that code and data
//	big {"bytes"}                 a JSON string of that many bytes
//	bad.empty                     neither result nor error
//	bad.both                      both a result and an error
//	bad.short                     one response too few for the whole batch
//	bad.panic                     the dispatcher panics
//	anything else                 -32601, as when no worker serves it
type fakeDispatcher struct {
	mu      sync.Mutex
	batches [][]schema.Call

	entered chan struct{} // one value per block call started
	release chan struct{} // closed to let block calls answer
	ctxErrs chan error    // the context error a block call saw
}

var _ schema.Dispatcher = (*fakeDispatcher)(nil)

func newFake() *fakeDispatcher {
	return &fakeDispatcher{
		entered: make(chan struct{}, 1024),
		release: make(chan struct{}),
		ctxErrs: make(chan error, 1024),
	}
}

// Dispatch runs every call on a goroutine of its own and emits its answer
// when it has it, as the aggregator does.
func (f *fakeDispatcher) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(calls))
	f.mu.Unlock()
	for _, c := range calls {
		if c.Method == "bad.panic" {
			panic("fake dispatcher panic")
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range calls {
		if c.IsNotification() || c.Method == "bad.short" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f.answer(ctx, c)
			r.ID = c.ID
			mu.Lock()
			defer mu.Unlock()
			emit(i, r)
		}()
	}
	wg.Wait()
}

func (f *fakeDispatcher) answer(ctx context.Context, c schema.Call) schema.Response {
	result := func(v any) schema.Response {
		b, err := json.Marshal(v)
		if err != nil {
			return schema.Response{Error: schema.ErrorFrom(err)}
		}
		return schema.Response{Result: b}
	}
	invalid := func() schema.Response {
		return schema.Response{Error: schema.NewError(schema.CodeInvalidParams, "invalid params", nil)}
	}
	switch c.Method {
	case "echo":
		if c.Params == nil {
			return schema.Response{Result: json.RawMessage("null")}
		}
		return schema.Response{Result: c.Params}
	case "subtract":
		var pos []float64
		if json.Unmarshal(c.Params, &pos) == nil && len(pos) == 2 {
			return result(pos[0] - pos[1])
		}
		var named struct{ Minuend, Subtrahend float64 }
		if json.Unmarshal(c.Params, &named) == nil {
			return result(named.Minuend - named.Subtrahend)
		}
		return invalid()
	case "sum":
		var xs []float64
		if json.Unmarshal(c.Params, &xs) != nil {
			return invalid()
		}
		var total float64
		for _, x := range xs {
			total += x
		}
		return result(total)
	case "get_data":
		return result([]any{"hello", 5})
	case "notify_hello", "notify_sum", "update":
		return schema.Response{Result: json.RawMessage("null")}
	case "fail":
		return schema.Response{Error: schema.NewError(2001, "business rule", map[string]any{"why": "closed"})}
	case "block":
		f.entered <- struct{}{}
		select {
		case <-ctx.Done():
			f.ctxErrs <- ctx.Err()
			return schema.Response{Error: schema.ErrorFrom(ctx.Err())}
		case <-f.release:
			return result("released")
		}
	case "sleep":
		var p struct{ MS int }
		if json.Unmarshal(c.Params, &p) != nil {
			return invalid()
		}
		select {
		case <-time.After(time.Duration(p.MS) * time.Millisecond):
			return result(map[string]int{"slept_ms": p.MS})
		case <-ctx.Done():
			f.ctxErrs <- ctx.Err()
			return schema.Response{Error: schema.ErrorFrom(ctx.Err())}
		}
	case "error":
		var p struct {
			Code int
			Data json.RawMessage
		}
		if json.Unmarshal(c.Params, &p) != nil {
			return invalid()
		}
		return schema.Response{Error: schema.NewError(p.Code, "error asked for", p.Data)}
	case "big":
		var p struct{ Bytes int }
		if json.Unmarshal(c.Params, &p) != nil || p.Bytes < 2 {
			return invalid()
		}
		b := bytes.Repeat([]byte{'x'}, p.Bytes)
		b[0], b[len(b)-1] = '"', '"'
		return schema.Response{Result: b}
	case "bad.empty":
		return schema.Response{}
	case "bad.both":
		return schema.Response{Result: json.RawMessage(`1`), Error: schema.NewError(schema.CodeToolError, "tool error", nil)}
	}
	return schema.Response{Error: schema.NewError(schema.CodeMethodNotFound, "method not found",
		map[string]any{"method": c.Method})}
}

// dispatched returns every call the fake was given, in order.
func (f *fakeDispatcher) dispatched() []schema.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []schema.Call
	for _, b := range f.batches {
		all = append(all, b...)
	}
	return all
}

// dispatches returns how many times Dispatch was called.
func (f *fakeDispatcher) dispatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches)
}

func methods(calls []schema.Call) []string {
	var ms []string
	for _, c := range calls {
		ms = append(ms, c.Method)
	}
	return ms
}

var discard = slog.New(slog.DiscardHandler)

// newServer returns a server over a fresh fake dispatcher.
func newServer(t testing.TB, opts ...Option) (*Server, *fakeDispatcher) {
	t.Helper()
	f := newFake()
	s, err := New(f, append([]Option{WithLogger(discard)}, opts...)...)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	return s, f
}

// post builds a JSON POST /rpc with the given extra headers (name, value
// pairs).
func post(body string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/rpc", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// answer is one response as a test compares it: the id's raw bytes, the
// result compacted, the error code and data.
type answer struct {
	ID     string
	Result string
	Code   int
	Data   map[string]any
}

// decode reads a JSON-RPC answer body: whether it is an array, and its
// responses.
func decode(t *testing.T, body []byte) (batch bool, as []answer) {
	t.Helper()
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		batch = true
		if err := json.Unmarshal(body, &raws); err != nil {
			t.Fatalf("decode batch %s: %v", body, err)
		}
	} else {
		raws = []json.RawMessage{body}
	}
	for _, raw := range raws {
		var r schema.Response
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("decode response %s: %v", raw, err)
		}
		a := answer{ID: string(r.ID)}
		if r.Error != nil {
			a.Code = r.Error.Code
			if len(r.Error.Data) > 0 {
				if err := json.Unmarshal(r.Error.Data, &a.Data); err != nil {
					t.Fatalf("error data %s is not an object: %v", r.Error.Data, err)
				}
			}
		} else {
			var c bytes.Buffer
			if err := json.Compact(&c, r.Result); err != nil {
				t.Fatalf("compact result %s: %v", r.Result, err)
			}
			a.Result = c.String()
		}
		as = append(as, a)
	}
	return batch, as
}

// decodeOne reads a body that must hold exactly one response object.
func decodeOne(t *testing.T, body []byte) answer {
	t.Helper()
	batch, as := decode(t, body)
	if batch || len(as) != 1 {
		t.Fatalf("body %s: want one response object", body)
	}
	return as[0]
}

func readAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}
