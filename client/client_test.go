package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// TestCall calls the demo tools of a whole in-process cluster.
func TestCall(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	for _, tc := range []struct {
		name     string
		method   string
		params   any
		opts     []client.CallOption
		want     string // result as JSON, when no error is wanted
		wantErr  error
		wantCode int
	}{
		{name: "echo object", method: "echo", params: map[string]string{"hello": "world"}, want: `{"hello":"world"}`},
		{name: "echo raw params", method: "echo", params: json.RawMessage(` [1, "two", 12345678901234567890] `), want: `[1,"two",12345678901234567890]`},
		{name: "no params", method: "echo", want: `null`},
		{name: "positional", method: "subtract", params: []int{42, 23}, want: `19`},
		{name: "tool code passes through", method: "fail", params: map[string]any{"code": 2001, "message": "insufficient funds"}, wantCode: 2001},
		{name: "unknown method", method: "no.such.tool", wantErr: schema.ErrMethodNotFound},
		{name: "invalid params", method: "sleep", params: map[string]any{}, wantErr: schema.ErrInvalidParams},
		{name: "server timeout", method: "sleep", params: map[string]int{"ms": 5000}, opts: []client.CallOption{client.Timeout(300 * time.Millisecond)}, wantErr: schema.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			var got json.RawMessage
			err := c.Call(ctx, tc.method, tc.params, &got, tc.opts...)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Call(%s) = %v, want %v", tc.method, err, tc.wantErr)
				}
			case tc.wantCode != 0:
				var se *schema.Error
				if !errors.As(err, &se) || se.Code != tc.wantCode {
					t.Fatalf("Call(%s) = %v, want a *schema.Error with code %d", tc.method, err, tc.wantCode)
				}
			case err != nil:
				t.Fatalf("Call(%s) = %v, want %s", tc.method, err, tc.want)
			default:
				if string(got) != tc.want {
					t.Fatalf("Call(%s) result = %s, want %s", tc.method, got, tc.want)
				}
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("Call(%s) took %s", tc.method, d)
			}
		})
	}
}

func TestCallDecodes(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	type point struct{ X, Y int }
	var got point
	if err := c.Call(t.Context(), "echo", point{X: 1, Y: 2}, &got); err != nil {
		t.Fatalf("Call(echo) = %v", err)
	}
	if want := (point{X: 1, Y: 2}); got != want {
		t.Errorf("Call(echo) decoded %+v, want %+v", got, want)
	}
	if err := c.Call(t.Context(), "echo", point{}, nil); err != nil {
		t.Errorf("Call(echo) with a nil result = %v, want nil", err)
	}
	var wrong string
	if err := c.Call(t.Context(), "echo", point{}, &wrong); err == nil {
		t.Errorf("Call(echo) decoding an object into a string = nil, want an error")
	}
}

func TestCallRefusesBadInput(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1/rpc")
	for _, tc := range []struct {
		name   string
		params any
		opts   []client.CallOption
	}{
		{name: "scalar params", params: 42},
		{name: "string params", params: "x"},
		{name: "invalid raw params", params: json.RawMessage(`{`)},
		{name: "unencodable params", params: map[string]any{"f": func() {}}},
		{name: "zero timeout", params: []int{1}, opts: []client.CallOption{client.Timeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Call(t.Context(), "echo", tc.params, nil, tc.opts...)
			if err == nil || errors.Is(err, client.ErrTransport) {
				t.Fatalf("Call(echo, %v) = %v, want an error before sending", tc.params, err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		opts []client.Option
		ok   bool
	}{
		{name: "http", url: "http://127.0.0.1:8080/rpc", ok: true},
		{name: "https", url: "https://toolbus.example/rpc", ok: true},
		{name: "ws", url: "ws://127.0.0.1:1/rpc", ok: true},
		{name: "no scheme", url: "127.0.0.1:8080/rpc"},
		{name: "other scheme", url: "ftp://127.0.0.1/rpc"},
		{name: "no host", url: "http:///rpc"},
		{name: "bad retry policy", url: "http://127.0.0.1/rpc", opts: []client.Option{client.WithRetry(client.RetryPolicy{})}},
		{name: "bad backoff", url: "http://127.0.0.1/rpc", opts: []client.Option{client.WithReconnectBackoff(time.Second, time.Millisecond)}},
		{name: "bad timeout", url: "http://127.0.0.1/rpc", opts: []client.Option{client.WithTimeout(-time.Second)}},
		{name: "nil http client", url: "http://127.0.0.1/rpc", opts: []client.Option{client.WithHTTPClient(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(tc.url, tc.opts...)
			if c != nil {
				c.Close()
			}
			if got := err == nil; got != tc.ok {
				t.Fatalf("New(%q) = %v, want ok %v", tc.url, err, tc.ok)
			}
		})
	}
}

func TestNotify(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	for _, tc := range []struct {
		name   string
		method string
		params any
	}{
		{name: "spec example", method: "notify_hello", params: []int{7}},
		{name: "no params", method: "echo"},
		{name: "unknown method", method: "no.such.tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Notify(t.Context(), tc.method, tc.params); err != nil {
				t.Fatalf("Notify(%s) = %v, want nil", tc.method, err)
			}
		})
	}
}

// TestBatch sends one batch of results, errors, a timeout and
// notifications through the cluster; every call gets its own outcome.
func TestBatch(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	b := c.Batch(client.Timeout(time.Second))
	echo := b.Add("echo", map[string]int{"n": 1})
	sub := b.Add("subtract", []int{42, 23})
	fail := b.Add("fail", map[string]any{"code": 2001, "message": "insufficient funds", "data": map[string]int{"balance": 3}})
	slow := b.Add("sleep", map[string]int{"ms": 5000})
	missing := b.Add("no.such.tool", nil)
	bad := b.Add("echo", 7)
	if err := b.Notify("notify_hello", []int{7}); err != nil {
		t.Fatalf("Notify = %v", err)
	}
	if err := b.Notify("notify_sum", []int{1, 2, 4}); err != nil {
		t.Fatalf("Notify = %v", err)
	}
	if err := echo.Err(); !errors.Is(err, client.ErrNotSent) {
		t.Errorf("Err() before Send = %v, want %v", err, client.ErrNotSent)
	}
	start := time.Now()
	if err := b.Send(t.Context()); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Send took %s, want about the batch timeout of 1s", d)
	}

	var n map[string]int
	if err := echo.Decode(&n); err != nil || n["n"] != 1 {
		t.Errorf("echo = %v, %v, want map[n:1]", n, err)
	}
	var diff int
	if err := sub.Decode(&diff); err != nil || diff != 19 {
		t.Errorf("subtract = %d, %v, want 19", diff, err)
	}
	var se *schema.Error
	if err := fail.Err(); !errors.As(err, &se) || se.Code != 2001 || string(se.Data) != `{"balance":3}` {
		t.Errorf("fail = %v (data %s), want code 2001 with its data", err, dataOf(se))
	}
	for _, tc := range []struct {
		name string
		f    *client.Future
		want error
	}{
		{name: "sleep past the batch timeout", f: slow, want: schema.ErrTimeout},
		{name: "unknown method", f: missing, want: schema.ErrMethodNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.f.Err(); !errors.Is(err, tc.want) {
				t.Errorf("Err() = %v, want %v", err, tc.want)
			}
		})
	}
	if err := bad.Err(); err == nil || errors.Is(err, client.ErrTransport) {
		t.Errorf("call with scalar params: Err() = %v, want an encoding error", err)
	}
	if err := b.Send(t.Context()); err == nil {
		t.Errorf("second Send = nil, want an error")
	}
}

func dataOf(e *schema.Error) string {
	if e == nil {
		return ""
	}
	return string(e.Data)
}

// TestConcurrentCalls checks that concurrent calls over one client each
// get their own answer.
func TestConcurrentCalls(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			var got struct{ I int }
			if err := c.Call(t.Context(), "echo", map[string]int{"i": i}, &got); err != nil {
				errs <- err
				return
			}
			if got.I != i {
				errs <- fmt.Errorf("call %d got %d", i, got.I)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestUniqueIDs checks on the wire that no two calls, of one client or of
// two, share an id, and that ids are JSON strings.
func TestUniqueIDs(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
		writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
	})
	clients := []*client.Client{newClient(t, f.URL), newClient(t, f.URL)}
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 4 {
			wg.Go(func() {
				for range 50 {
					if err := c.Call(t.Context(), "echo", nil, nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		b := c.Batch()
		for range 100 {
			b.Add("echo", nil)
		}
		wg.Go(func() {
			if err := b.Send(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool)
	for _, r := range f.requests() {
		for _, it := range r.items {
			id := string(it.Request.ID)
			if id == "" || id[0] != '"' {
				t.Fatalf("id %s is not a JSON string", id)
			}
			if seen[id] {
				t.Fatalf("id %s sent twice", id)
			}
			seen[id] = true
		}
	}
	if got, want := len(seen), 2*(4*50+100); got != want {
		t.Errorf("saw %d ids, want %d", got, want)
	}
}

func TestFutureDecodeRaw(t *testing.T) {
	cl := toolbustest.Start(t)
	c := newClient(t, cl.URL)
	b := c.Batch()
	f := b.Add("echo", json.RawMessage(`{"big":12345678901234567890}`))
	if err := b.Send(t.Context()); err != nil {
		t.Fatalf("Send = %v", err)
	}
	var raw json.RawMessage
	if err := f.Decode(&raw); err != nil {
		t.Fatalf("Decode = %v", err)
	}
	var got, want any
	json.Unmarshal(raw, &got)
	json.Unmarshal([]byte(`{"big":12345678901234567890}`), &want)
	if string(raw) != `{"big":12345678901234567890}` && !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(raw) = %s, want the echoed params", raw)
	}
}

func TestSentID(t *testing.T) {
	var sent json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		sent = req.ID
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","result":1,"id":%s}`, req.ID)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var id string
	if err := c.Call(context.Background(), "echo", nil, nil, client.SentID(&id)); err != nil {
		t.Fatal(err)
	}
	if id == "" || id != string(sent) {
		t.Errorf("SentID = %s, want the id the server received, %s", id, sent)
	}
}

// TestRefusedSaysWhatToDo: an HTTP call to an address nothing listens on
// fails with a sentence naming the address and the fix, still a transport
// error.
func TestRefusedSaysWhatToDo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/rpc"
	l.Close()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Call(context.Background(), "echo", nil, nil)
	if !errors.Is(err, client.ErrTransport) || !strings.Contains(err.Error(), "nothing accepts connections at "+url) {
		t.Errorf("Call to a closed port = %v, want a transport error that names %s and what to do", err, url)
	}
}
