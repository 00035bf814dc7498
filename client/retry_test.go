package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

var fastRetry = client.WithRetry(client.RetryPolicy{MaxAttempts: 3, Base: 10 * time.Millisecond, Max: 50 * time.Millisecond})

// failThen answers the first fails requests' calls with the error code and
// data, and echoes afterwards.
func failThen(fails, code int, data string) answerFunc {
	return func(w http.ResponseWriter, req request, n int) {
		if n > fails {
			writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
			return
		}
		var rs []schema.Response
		for _, it := range req.items {
			if !it.Request.IsNotification() {
				rs = append(rs, failure(it.Request.ID, code, data))
			}
		}
		writeAnswer(w, 200, "application/json", req.batch, rs...)
	}
}

func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    answerFunc
		opts      []client.Option
		wantCalls int   // requests the server saw
		wantErr   error // nil: the call succeeds in the end
		minTime   time.Duration
	}{
		{name: "overloaded: retry_after_ms is honoured", answer: failThen(1, schema.CodeOverloaded, `{"retry_after_ms":300,"limit":"max_in_flight"}`),
			opts: []client.Option{fastRetry}, wantCalls: 2, minTime: 300 * time.Millisecond},
		{name: "retryable timeout", answer: failThen(2, schema.CodeTimeout, `{"retryable":true}`),
			opts: []client.Option{fastRetry}, wantCalls: 3},
		{name: "attempts are bounded", answer: failThen(10, schema.CodeUnavailable, `{"retryable":true}`),
			opts: []client.Option{fastRetry}, wantCalls: 3, wantErr: schema.ErrUnavailable},
		{name: "not retryable", answer: failThen(1, schema.CodeToolError, `{"retryable":false}`),
			opts: []client.Option{fastRetry}, wantCalls: 1, wantErr: schema.ErrTool},
		{name: "no data", answer: failThen(1, schema.CodeInternal, ``),
			opts: []client.Option{fastRetry}, wantCalls: 1, wantErr: schema.ErrInternal},
		{name: "overloaded without retry_after_ms", answer: failThen(1, schema.CodeOverloaded, `{"limit":"x"}`),
			opts: []client.Option{fastRetry}, wantCalls: 1, wantErr: schema.ErrOverloaded},
		{name: "retries are opt-in", answer: failThen(1, schema.CodeTimeout, `{"retryable":true}`),
			wantCalls: 1, wantErr: schema.ErrTimeout},
		{name: "a proxy error page is not retried", answer: func(w http.ResponseWriter, req request, n int) {
			if n == 1 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
		}, opts: []client.Option{fastRetry}, wantCalls: 1, wantErr: client.ErrTransport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.answer)
			c := newClient(t, f.URL, tc.opts...)
			start := time.Now()
			var got []int
			err := c.Call(t.Context(), "echo", []int{7}, &got)
			if tc.wantErr == nil && (err != nil || len(got) != 1 || got[0] != 7) {
				t.Errorf("Call = %v, %v, want [7]", got, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Call = %v, want %v", err, tc.wantErr)
			}
			if n := len(f.requests()); n != tc.wantCalls {
				t.Errorf("server saw %d requests, want %d", n, tc.wantCalls)
			}
			if d := time.Since(start); d < tc.minTime {
				t.Errorf("Call returned after %s, want at least %s", d, tc.minTime)
			}
			ids := make(map[string]bool)
			for _, r := range f.requests() {
				ids[string(r.items[0].Request.ID)] = true
			}
			if len(ids) != 1 {
				t.Errorf("attempts carried ids %v, want the call's one id", ids)
			}
		})
	}
}

// TestRetryBoundedByContext checks that a wait the context cannot outlast
// is not started.
func TestRetryBoundedByContext(t *testing.T) {
	f := startFake(t, failThen(10, schema.CodeOverloaded, `{"retry_after_ms":60000}`))
	c := newClient(t, f.URL, fastRetry)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Call(ctx, "echo", nil, nil)
	if !errors.Is(err, schema.ErrOverloaded) {
		t.Errorf("Call = %v, want %v", err, schema.ErrOverloaded)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Call took %s, want no wait for a retry past the deadline", d)
	}
}

// TestNotifyNotRetried: a notification is sent once whatever the answer.
func TestNotifyNotRetried(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, n int) {
		writeAnswer(w, 200, "application/json", false, failure(nil, schema.CodeOverloaded, `{"retry_after_ms":10}`))
	})
	c := newClient(t, f.URL, fastRetry)
	if err := c.Notify(t.Context(), "notify_hello", []int{1}); !errors.Is(err, schema.ErrOverloaded) {
		t.Errorf("Notify = %v, want %v", err, schema.ErrOverloaded)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

// TestRetryBatch: only the calls that failed retryably are sent again,
// never the batch's notifications.
func TestRetryBatch(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, n int) {
		var rs []schema.Response
		for _, it := range req.items {
			switch {
			case it.Request.IsNotification():
			case n == 1 && it.Request.Method == "flaky":
				rs = append(rs, failure(it.Request.ID, schema.CodeUnavailable, `{"retryable":true}`))
			case it.Request.Method == "broken":
				rs = append(rs, failure(it.Request.ID, schema.CodeToolError, ``))
			default:
				rs = append(rs, result(it.Request.ID, it.Request.Params))
			}
		}
		writeAnswer(w, 200, "application/json", req.batch, rs...)
	})
	c := newClient(t, f.URL, fastRetry)
	b := c.Batch()
	ok := b.Add("echo", []int{1})
	flaky := b.Add("flaky", []int{2})
	broken := b.Add("broken", []int{3})
	b.Notify("notify_hello", []int{4})
	if err := b.Send(t.Context()); err != nil {
		t.Fatalf("Send = %v", err)
	}
	for _, tc := range []struct {
		name string
		f    *client.Future
		want error
	}{
		{name: "echo", f: ok},
		{name: "flaky", f: flaky},
		{name: "broken", f: broken, want: schema.ErrTool},
	} {
		if err := tc.f.Err(); !errors.Is(err, tc.want) {
			t.Errorf("%s: Err() = %v, want %v", tc.name, err, tc.want)
		}
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(reqs))
	}
	if got := reqs[1].items; len(got) != 1 || got[0].Request.Method != "flaky" || !reqs[1].batch {
		t.Errorf("second request = %+v, want a batch of the flaky call alone", got)
	}
}

// failingTransport fails the first fails round trips without sending a
// byte, as a refused connection does, and passes the rest on.
type failingTransport struct {
	fails int32
	n     atomic.Int32
	next  http.RoundTripper
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.n.Add(1) <= f.fails {
		return nil, errors.New("connection refused")
	}
	return f.next.RoundTrip(r)
}

func TestRetryTransport(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, n int) {
		writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
	})
	for _, tc := range []struct {
		name    string
		fails   int32
		opts    []client.Option
		wantErr bool
	}{
		{name: "retried until it goes through", fails: 2, opts: []client.Option{fastRetry}},
		{name: "attempts are bounded", fails: 3, opts: []client.Option{fastRetry}, wantErr: true},
		{name: "not retried without a policy", fails: 1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			ft := &failingTransport{fails: tc.fails, next: tr}
			c := newClient(t, f.URL, append(tc.opts, client.WithHTTPClient(&http.Client{Transport: ft}))...)
			err := c.Call(t.Context(), "echo", nil, nil)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Call = %v, want nil", err)
				}
				return
			}
			var te *client.TransportError
			if !errors.As(err, &te) || !te.Retryable {
				t.Errorf("Call = %v, want a retryable *TransportError", err)
			}
		})
	}
}
