package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

// TestProxyAnswers checks that an answer is read as JSON-RPC whatever the
// status and Content-Type, and that what is not JSON-RPC is a transport
// error naming the status.
func TestProxyAnswers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string // %s is replaced by the call's id
		wantResult  string
		wantCode    int
		wantStatus  int // of a *TransportError
		wantErr     error
	}{
		{name: "502 with a JSON-RPC error", status: 502, contentType: "text/html",
			body: `{"jsonrpc":"2.0","id":%s,"error":{"code":-32003,"message":"unavailable","data":{"retryable":true}}}`, wantCode: schema.CodeUnavailable},
		{name: "502 with HTML", status: 502, contentType: "text/html",
			body: `<html><body>Bad Gateway</body></html>`, wantStatus: 502, wantErr: client.ErrInvalidResponse},
		{name: "200 text/plain with a result", status: 200, contentType: "text/plain",
			body: `{"jsonrpc":"2.0","id":%s,"result":{"ok":true}}`, wantResult: `{"ok":true}`},
		{name: "503 with a JSON body that is not JSON-RPC", status: 503, contentType: "application/json",
			body: `{"error":"upstream down"}`, wantStatus: 503, wantErr: client.ErrInvalidResponse},
		{name: "200 with garbage", status: 200, contentType: "application/json",
			body: `not json`, wantStatus: 200, wantErr: client.ErrInvalidResponse},
		{name: "500 with an empty body", status: 500, contentType: "text/plain", wantStatus: 500},
		{name: "204 for a call", status: 204, wantErr: client.ErrMissingResponse},
		{name: "200 with neither result nor error", status: 200, contentType: "application/json",
			body: `{"jsonrpc":"2.0","id":%s}`, wantErr: client.ErrInvalidResponse},
		{name: "200 with both result and error", status: 200, contentType: "application/json",
			body: `{"jsonrpc":"2.0","id":%s,"result":1,"error":{"code":1,"message":"x"}}`, wantErr: client.ErrInvalidResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
				body := strings.Replace(tc.body, "%s", string(req.items[0].Request.ID), 1)
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, body)
			})
			c := newClient(t, f.URL)
			var got json.RawMessage
			err := c.Call(t.Context(), "echo", nil, &got)
			if tc.wantResult != "" {
				if err != nil || string(got) != tc.wantResult {
					t.Fatalf("Call = %s, %v, want %s", got, err, tc.wantResult)
				}
				return
			}
			if tc.wantCode != 0 {
				var se *schema.Error
				if !errors.As(err, &se) || se.Code != tc.wantCode {
					t.Fatalf("Call = %v, want a *schema.Error with code %d", err, tc.wantCode)
				}
				if errors.Is(err, client.ErrTransport) {
					t.Errorf("Call = %v, which matches ErrTransport; want a server error only", err)
				}
			}
			if tc.wantStatus != 0 {
				var te *client.TransportError
				if !errors.As(err, &te) || te.StatusCode != tc.wantStatus {
					t.Fatalf("Call = %v, want a *TransportError with status %d", err, tc.wantStatus)
				}
				if !errors.Is(err, client.ErrTransport) {
					t.Errorf("errors.Is(%v, ErrTransport) = false, want true", err)
				}
				if te.Retryable {
					t.Errorf("Call = %v, marked retryable; want not, the request reached a server", err)
				}
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Call = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestBatchMatching answers batches in ways a server may (any order) and
// ways it must not (ids missing, repeated or unknown).
func TestBatchMatching(t *testing.T) {
	for _, tc := range []struct {
		name string
		// answer turns the in-order echo responses into what is sent.
		answer      func([]schema.Response) []schema.Response
		wantResults []bool  // per call: whether it has its own echo
		wantCallErr []error // per call
		wantSendErr error
		wantCode    int // of the whole message, when it failed as one
	}{
		{name: "in order", answer: func(rs []schema.Response) []schema.Response { return rs },
			wantResults: []bool{true, true, true}},
		{name: "reversed", answer: func(rs []schema.Response) []schema.Response { slices.Reverse(rs); return rs },
			wantResults: []bool{true, true, true}},
		{name: "shuffled", answer: func(rs []schema.Response) []schema.Response { return []schema.Response{rs[1], rs[2], rs[0]} },
			wantResults: []bool{true, true, true}},
		{name: "one missing", answer: func(rs []schema.Response) []schema.Response { return []schema.Response{rs[2], rs[0]} },
			wantResults: []bool{true, false, true}, wantCallErr: []error{nil, client.ErrMissingResponse, nil}},
		{name: "one duplicated", answer: func(rs []schema.Response) []schema.Response { return append(rs, rs[0]) },
			wantResults: []bool{false, true, true}, wantCallErr: []error{client.ErrDuplicateResponse, nil, nil},
			wantSendErr: client.ErrDuplicateResponse},
		{name: "unknown id", answer: func(rs []schema.Response) []schema.Response {
			return append(rs, result(json.RawMessage(`"someone-else"`), json.RawMessage(`1`)))
		}, wantResults: []bool{true, true, true}, wantSendErr: client.ErrUnknownResponse},
		{name: "numeric id", answer: func(rs []schema.Response) []schema.Response {
			return append(rs[1:], result(json.RawMessage(`1`), json.RawMessage(`1`)))
		}, wantResults: []bool{false, true, true}, wantCallErr: []error{client.ErrMissingResponse, nil, nil},
			wantSendErr: client.ErrUnknownResponse},
		{name: "whole message refused", answer: func([]schema.Response) []schema.Response {
			return []schema.Response{{Error: schema.LimitError("max_batch_items", 2, 3)}}
		}, wantResults: []bool{false, false, false}, wantCode: schema.CodeLimitExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
				writeAnswer(w, 200, "application/json", true, tc.answer(echoAll(req))...)
			})
			c := newClient(t, f.URL)
			b := c.Batch()
			futures := []*client.Future{
				b.Add("echo", []int{0}),
				b.Add("echo", []int{1}),
				b.Add("echo", []int{2}),
			}
			err := b.Send(t.Context())
			switch {
			case tc.wantSendErr != nil:
				if !errors.Is(err, tc.wantSendErr) {
					t.Errorf("Send = %v, want %v", err, tc.wantSendErr)
				}
			case tc.wantCode != 0:
				var se *schema.Error
				if !errors.As(err, &se) || se.Code != tc.wantCode {
					t.Errorf("Send = %v, want code %d", err, tc.wantCode)
				}
			case err != nil:
				t.Errorf("Send = %v, want nil", err)
			}
			for i, f := range futures {
				var got []int
				err := f.Decode(&got)
				if has := err == nil && len(got) == 1 && got[0] == i; has != tc.wantResults[i] {
					t.Errorf("call %d: Decode = %v, %v; want its own result: %v", i, got, err, tc.wantResults[i])
				}
				if tc.wantCallErr != nil && tc.wantCallErr[i] != nil && !errors.Is(err, tc.wantCallErr[i]) {
					t.Errorf("call %d: Err() = %v, want %v", i, err, tc.wantCallErr[i])
				}
				if tc.wantCode != 0 {
					var se *schema.Error
					if !errors.As(err, &se) || se.Code != tc.wantCode {
						t.Errorf("call %d: Err() = %v, want code %d", i, err, tc.wantCode)
					}
				}
			}
		})
	}
}

func TestSingleWrongID(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
		writeAnswer(w, 200, "application/json", false, result(json.RawMessage(`"not-mine"`), json.RawMessage(`1`)))
	})
	c := newClient(t, f.URL)
	err := c.Call(t.Context(), "echo", nil, nil)
	for _, want := range []error{client.ErrMissingResponse, client.ErrUnknownResponse} {
		if !errors.Is(err, want) {
			t.Errorf("Call = %v, want %v", err, want)
		}
	}
}

// TestTimeoutHeader checks the Toolbus-Timeout header each kind of call
// sends.
func TestTimeoutHeader(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
		writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
	})
	plain := newClient(t, f.URL)
	withDefault := newClient(t, f.URL, client.WithTimeout(2*time.Second), client.WithHeader("Authorization", "Bearer t0ken"))
	deadline := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	for _, tc := range []struct {
		name string
		send func(t *testing.T) error
		want string
	}{
		{name: "none", send: func(t *testing.T) error { return plain.Call(t.Context(), "echo", nil, nil) }},
		{name: "call", want: "300ms", send: func(t *testing.T) error {
			return plain.Call(t.Context(), "echo", nil, nil, client.Timeout(300*time.Millisecond))
		}},
		{name: "client default", want: "2s", send: func(t *testing.T) error { return withDefault.Call(t.Context(), "echo", nil, nil) }},
		{name: "client default yields to the context's deadline", send: func(t *testing.T) error {
			return withDefault.Call(deadline(t), "echo", nil, nil)
		}},
		{name: "call over client default", want: "1.5s", send: func(t *testing.T) error {
			return withDefault.Call(t.Context(), "echo", nil, nil, client.Timeout(1500*time.Millisecond))
		}},
		{name: "batch", want: "1s", send: func(t *testing.T) error {
			b := plain.Batch(client.Timeout(time.Second))
			b.Add("echo", nil)
			b.Add("echo", nil)
			return b.Send(t.Context())
		}},
		{name: "batch takes the smallest", want: "250ms", send: func(t *testing.T) error {
			b := plain.Batch(client.Timeout(time.Second))
			b.Add("echo", nil, client.Timeout(5*time.Second))
			b.Add("echo", nil, client.Timeout(250*time.Millisecond))
			return b.Send(t.Context())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.requests())
			if err := tc.send(t); err != nil {
				t.Fatalf("send = %v", err)
			}
			reqs := f.requests()
			if len(reqs) != before+1 {
				t.Fatalf("server got %d requests, want 1", len(reqs)-before)
			}
			if got := reqs[before].header.Get(schema.HeaderTimeout); got != tc.want {
				t.Errorf("%s = %q, want %q", schema.HeaderTimeout, got, tc.want)
			}
		})
	}
	for i, r := range f.requests() {
		want := ""
		if i == 2 || i == 3 || i == 4 {
			want = "Bearer t0ken" // sent by withDefault
		}
		if got := r.header.Get("Authorization"); got != want {
			t.Errorf("request %d: Authorization = %q, want %q", i, got, want)
		}
	}
}

// TestClientSideTimeout checks that the client stops waiting for a server
// that never answers once the timeout and its grace have passed, and that
// the caller's context ending is told apart from it.
func TestClientSideTimeout(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
		<-req.ctx.Done()
	})
	c := newClient(t, f.URL, client.WithTimeoutGrace(100*time.Millisecond))

	start := time.Now()
	err := c.Call(t.Context(), "sleep", nil, nil, client.Timeout(200*time.Millisecond))
	for _, want := range []error{schema.ErrTimeout, context.DeadlineExceeded} {
		if !errors.Is(err, want) {
			t.Errorf("Call = %v, want %v", err, want)
		}
	}
	if errors.Is(err, client.ErrTransport) {
		t.Errorf("Call = %v, want no transport error", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("Call gave up after %s, want about 300ms", d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	err = c.Call(ctx, "sleep", nil, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, schema.ErrTimeout) || errors.Is(err, client.ErrTransport) {
		t.Errorf("Call with a canceled context = %v, want context.Canceled only", err)
	}
}

func TestClosed(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, req request, _ int) {
		writeAnswer(w, 200, "application/json", req.batch, echoAll(req)...)
	})
	c := newClient(t, f.URL)
	if err := c.Call(t.Context(), "echo", nil, nil); err != nil {
		t.Fatalf("Call = %v", err)
	}
	c.Close()
	c.Close()
	if err := c.Call(t.Context(), "echo", nil, nil); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Call after Close = %v, want %v", err, client.ErrClosed)
	}
}
