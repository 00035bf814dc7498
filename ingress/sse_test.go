package ingress

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestWantsEvents(t *testing.T) {
	tests := []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"*/*"}, false},
		{[]string{"text/event-stream"}, true},
		{[]string{"text/event-stream; charset=utf-8"}, true},
		{[]string{"application/json, text/event-stream"}, true},
		{[]string{"application/json", "text/event-stream"}, true},
		{[]string{"text/event-stream;q=0.5, application/json"}, false},
		{[]string{"text/event-stream;q=0"}, false},
		{[]string{"text/event-stream;q=0.9, application/json;q=0.1"}, true},
		{[]string{"garbage;;, text/event-stream"}, true},
	}
	for _, tt := range tests {
		h := http.Header{"Accept": tt.accept}
		if got := wantsEvents(h); got != tt.want {
			t.Errorf("wantsEvents(Accept: %q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct {
	name string // "" for a message
	data string
}

// eventReader reads events and comments from a stream.
type eventReader struct {
	sc       *bufio.Scanner
	comments int
}

// next returns the next event, counting the comments on its way; ok is
// false at the end of the stream.
func (r *eventReader) next(t *testing.T) (ev sseEvent, ok bool) {
	t.Helper()
	var data []string
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if data == nil && ev.name == "" {
				continue
			}
			ev.data = strings.Join(data, "\n")
			return ev, true
		case strings.HasPrefix(line, ":"):
			r.comments++
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("stream line %q is not an event field", line)
		}
	}
	return ev, false
}

// postEvents sends body to the server's /rpc asking for events.
func postEvents(t *testing.T, ts *httptest.Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/rpc", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", EventStream)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestSSEFirstEventBeforeSlowCall checks that the fast call's event arrives
// while the slow call of the same batch is still running.
func TestSSEFirstEventBeforeSlowCall(t *testing.T) {
	s, f := newServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp := postEvents(t, ts, `[{"jsonrpc":"2.0","method":"block","id":2},{"jsonrpc":"2.0","method":"sleep","params":{"ms":50},"id":1}]`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != EventStream {
		t.Fatalf("answer %d %s, want 200 %s", resp.StatusCode, resp.Header.Get("Content-Type"), EventStream)
	}
	er := &eventReader{sc: bufio.NewScanner(resp.Body)}
	ev, ok := er.next(t)
	if !ok {
		t.Fatal("stream ended before the first event")
	}
	if a := decodeOne(t, []byte(ev.data)); ev.name != "" || a.ID != "1" || a.Result != `{"slept_ms":50}` {
		t.Fatalf("first event %+v, want the fast call's answer", ev)
	}
	// The slow call is still blocked: it cannot answer before release.
	close(f.release)
	ev, _ = er.next(t)
	if a := decodeOne(t, []byte(ev.data)); a.ID != "2" || a.Result != `"released"` {
		t.Errorf("second event %+v, want the slow call's answer", ev)
	}
	ev, _ = er.next(t)
	if ev.name != "done" || ev.data != `{"answers":2}` {
		t.Errorf("last event %+v, want done with 2 answers", ev)
	}
	if _, ok := er.next(t); ok {
		t.Error("events after done")
	}
}

func TestSSEHeartbeat(t *testing.T) {
	s, f := newServer(t, WithSSEHeartbeat(5*time.Millisecond))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp := postEvents(t, ts, `{"jsonrpc":"2.0","method":"block","id":1}`)
	<-f.entered
	br := bufio.NewReader(resp.Body)
	for pings := 0; pings < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if line == ": ping\n" {
			pings++
		} else if line != "\n" {
			t.Fatalf("line %q on an idle stream, want heartbeats", line)
		}
	}
	close(f.release)
	er := &eventReader{sc: bufio.NewScanner(br)}
	ev, _ := er.next(t)
	if a := decodeOne(t, []byte(ev.data)); a.Result != `"released"` {
		t.Errorf("event %+v, want the call's answer", ev)
	}
}

// TestSSEEvents checks one event per answer, the answers the ingress has
// at once first, then done.
func TestSSEEvents(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []answer // in order
	}{
		{name: "single", body: `{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}`,
			want: []answer{{ID: "1", Result: "[1]"}}},
		{name: "batch", body: `[{"jsonrpc":"2.0","method":"fail","id":"f"},{"jsonrpc":"2.0","method":"echo"},{"foo":1},{"jsonrpc":"2.0","method":"a..b","id":3}]`,
			want: []answer{{ID: "null", Code: schema.CodeInvalidRequest}, {ID: "3", Code: schema.CodeMethodNotFound}, {ID: `"f"`, Code: 2001}}},
		{name: "parse error", body: `[{`, want: []answer{{ID: "null", Code: schema.CodeParseError}}},
		{name: "batch limit", body: `[1,2,3,4,5]`, want: []answer{{ID: "null", Code: schema.CodeLimitExceeded}}},
		{name: "multi-line result", body: "{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[1,\r\n2,\r3\n],\"id\":1}",
			want: []answer{{ID: "1", Result: "[1,2,3]"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newServer(t, WithLimits(Limits{MaxBatchItems: 4}))
			rec := serve(s.Handler(), post(tt.body, "Accept", EventStream))
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != EventStream {
				t.Fatalf("answer %d %s, want 200 %s", rec.Code, rec.Header().Get("Content-Type"), EventStream)
			}
			er := &eventReader{sc: bufio.NewScanner(rec.Body)}
			for i, w := range tt.want {
				ev, ok := er.next(t)
				if !ok {
					t.Fatalf("stream ended after %d events", i)
				}
				if a := decodeOne(t, []byte(ev.data)); ev.name != "" || a.ID != w.ID || a.Result != w.Result || a.Code != w.Code {
					t.Errorf("event %d = %s %s, want %+v", i, ev.name, ev.data, w)
				}
			}
			if ev, _ := er.next(t); ev.name != "done" {
				t.Errorf("last event %+v, want done", ev)
			}
		})
	}
}

func TestSSERefusals(t *testing.T) {
	s, f := newServer(t)
	rec := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"echo"}`, "Accept", EventStream))
	if rec.Code != http.StatusNoContent {
		t.Errorf("notification = %d, want 204", rec.Code)
	}
	if n := len(f.dispatched()); n != 1 {
		t.Errorf("dispatched %d calls, want the notification", n)
	}
	rec = serve(s.Handler(), post(echo, "Accept", EventStream, "Content-Type", "text/plain"))
	if rec.Code != http.StatusUnsupportedMediaType || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("text/plain body = %d %s, want 415 as JSON", rec.Code, rec.Header().Get("Content-Type"))
	}
	rec = serve(s.Handler(), post(echo, "Accept", EventStream, schema.HeaderTimeout, "soon"))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("bad %s = %d, want 400", schema.HeaderTimeout, rec.Code)
	}
}

// TestSSEClientGone checks that a client closing the stream cancels its
// calls.
func TestSSEClientGone(t *testing.T) {
	s, f := newServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/rpc", strings.NewReader(`{"jsonrpc":"2.0","method":"block","id":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", EventStream)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-f.entered
	cancel()
	resp.Body.Close()
	if err := <-f.ctxErrs; err != context.Canceled {
		t.Errorf("dispatcher context error = %v, want %v", err, context.Canceled)
	}
}
