package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

const echo = `{"jsonrpc":"2.0","method":"echo","params":{"x":1},"id":7}`

func TestHTTPRules(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		contentType string // "-" leaves the header out
		body        string
		wantStatus  int
		wantCode    int    // JSON-RPC error code in the body; 0 for a result
		wantAllow   string // Allow header
		wantResult  string
	}{
		{name: "POST json", method: "POST", contentType: "application/json", body: echo,
			wantStatus: 200, wantResult: `{"x":1}`},
		{name: "charset utf-8", method: "POST", contentType: "application/json; charset=utf-8", body: echo,
			wantStatus: 200, wantResult: `{"x":1}`},
		{name: "media type case-insensitive", method: "POST", contentType: "Application/JSON; Charset=UTF-8", body: echo,
			wantStatus: 200, wantResult: `{"x":1}`},
		{name: "other parameter", method: "POST", contentType: "application/json;v=1", body: echo,
			wantStatus: 200, wantResult: `{"x":1}`},
		{name: "GET", method: "GET", contentType: "-", wantStatus: 405, wantCode: schema.CodeInvalidRequest, wantAllow: "POST"},
		{name: "PUT", method: "PUT", contentType: "application/json", body: echo,
			wantStatus: 405, wantCode: schema.CodeInvalidRequest, wantAllow: "POST"},
		{name: "DELETE", method: "DELETE", contentType: "-", wantStatus: 405, wantCode: schema.CodeInvalidRequest, wantAllow: "POST"},
		{name: "no content type", method: "POST", contentType: "-", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "text/plain", method: "POST", contentType: "text/plain", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "form", method: "POST", contentType: "application/x-www-form-urlencoded", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "json prefix only", method: "POST", contentType: "application/jsonl", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "charset utf-16", method: "POST", contentType: "application/json; charset=utf-16", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "malformed content type", method: "POST", contentType: "application/json; charset", body: echo,
			wantStatus: 415, wantCode: schema.CodeInvalidRequest},
		{name: "parse error is 200", method: "POST", contentType: "application/json", body: `{`,
			wantStatus: 200, wantCode: schema.CodeParseError},
		{name: "empty body is 200", method: "POST", contentType: "application/json", body: ``,
			wantStatus: 200, wantCode: schema.CodeParseError},
		{name: "tool error is 200", method: "POST", contentType: "application/json",
			body: `{"jsonrpc":"2.0","method":"fail","id":1}`, wantStatus: 200, wantCode: 2001},
		{name: "notification is 204", method: "POST", contentType: "application/json",
			body: `{"jsonrpc":"2.0","method":"echo"}`, wantStatus: 204},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t)
			r := httptest.NewRequest(tt.method, "/rpc", strings.NewReader(tt.body))
			if tt.contentType != "-" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			rec := serve(s.Handler(), r)
			if rec.Code != tt.wantStatus {
				t.Fatalf("%s /rpc (%s) = %d %s, want %d", tt.method, tt.contentType, rec.Code, rec.Body, tt.wantStatus)
			}
			if got := rec.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if tt.wantStatus == http.StatusNoContent {
				if rec.Body.Len() != 0 {
					t.Errorf("204 body = %q, want none", rec.Body)
				}
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(rec.Body.Len()) {
				t.Errorf("Content-Length = %q, want %d", cl, rec.Body.Len())
			}
			a := decodeOne(t, rec.Body.Bytes())
			if a.Code != tt.wantCode || a.Result != tt.wantResult {
				t.Errorf("answer %s: code %d result %q, want code %d result %q", rec.Body, a.Code, a.Result, tt.wantCode, tt.wantResult)
			}
			if tt.wantStatus != http.StatusOK && len(f.dispatched()) != 0 {
				t.Errorf("refused request dispatched %q, want nothing", methods(f.dispatched()))
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		method, path string
		wantStatus   int
	}{
		{"GET", "/healthz", 200},
		{"HEAD", "/healthz", 200},
		{"POST", "/healthz", 405},
		{"GET", "/readyz", 200},
		{"GET", "/rpc/", 404},
		{"GET", "/", 404},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			s, _ := newServer(t)
			rec := serve(s.Handler(), httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.wantStatus)
			}
		})
	}
}

func TestTimeoutHeader(t *testing.T) {
	tests := []struct {
		name    string
		value   string // "-" sends no header
		want    time.Duration
		wantErr bool
	}{
		{name: "absent", value: "-", want: 0},
		{name: "milliseconds", value: "300ms", want: 300 * time.Millisecond},
		{name: "compound", value: "1m30s", want: 90 * time.Second},
		{name: "fraction", value: "1.5s", want: 1500 * time.Millisecond},
		{name: "long", value: "48h", want: 48 * time.Hour},
		{name: "empty", value: "", wantErr: true},
		{name: "zero", value: "0s", wantErr: true},
		{name: "bare zero", value: "0", wantErr: true},
		{name: "negative", value: "-1s", wantErr: true},
		{name: "no unit", value: "300", wantErr: true},
		{name: "garbage", value: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t)
			r := post(`[{"jsonrpc":"2.0","method":"echo","id":1},{"jsonrpc":"2.0","method":"echo"}]`)
			if tt.value != "-" {
				r.Header[schema.HeaderTimeout] = []string{tt.value}
			}
			rec := serve(s.Handler(), r)
			if tt.wantErr {
				if rec.Code != http.StatusBadRequest {
					t.Fatalf("%s: %q = %d, want 400", schema.HeaderTimeout, tt.value, rec.Code)
				}
				a := decodeOne(t, rec.Body.Bytes())
				if a.Code != schema.CodeInvalidRequest || a.ID != "null" || a.Data["header"] != schema.HeaderTimeout {
					t.Errorf("answer %s: code %d id %s data %v, want -32600, null id, data naming %s",
						rec.Body, a.Code, a.ID, a.Data, schema.HeaderTimeout)
				}
				if got := f.dispatched(); len(got) != 0 {
					t.Errorf("dispatched %q, want nothing", methods(got))
				}
				return
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %q = %d %s, want 200", schema.HeaderTimeout, tt.value, rec.Code, rec.Body)
			}
			calls := f.dispatched()
			if len(calls) != 2 {
				t.Fatalf("dispatched %d calls, want 2", len(calls))
			}
			for _, c := range calls {
				if c.Timeout != tt.want {
					t.Errorf("call %s Timeout = %v, want %v", c.ID, c.Timeout, tt.want)
				}
			}
		})
	}
}

// TestIDsByteForByte checks that ids reach the dispatcher and come back
// exactly as the client wrote them.
func TestIDsByteForByte(t *testing.T) {
	ids := []string{
		`"101"`, `101`, `12345678901234567890`, `-12345678901234567890123`, `1.50`, `1e3`, `-0`,
		`""`, `"\u00e9"`, `"é"`, `"a\"b"`, `null`,
	}
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			s, f := newServer(t)
			rec := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"echo","params":[1],"id": `+id+` }`))
			a := decodeOne(t, rec.Body.Bytes())
			if a.ID != id || a.Result != `[1]` {
				t.Errorf("answer %s: id %s result %s, want id %s result [1]", rec.Body, a.ID, a.Result, id)
			}
			if calls := f.dispatched(); len(calls) != 1 || string(calls[0].ID) != id {
				t.Errorf("dispatched %v, want one call with id %s", calls, id)
			}
		})
	}
	t.Run("batch keeps request order", func(t *testing.T) {
		s, _ := newServer(t)
		var b strings.Builder
		b.WriteByte('[')
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"jsonrpc":"2.0","method":"echo","params":[` + strconv.Itoa(i) + `],"id":` + id + `}`)
		}
		b.WriteByte(']')
		rec := serve(s.Handler(), post(b.String()))
		batch, as := decode(t, rec.Body.Bytes())
		if !batch || len(as) != len(ids) {
			t.Fatalf("answer %s: want an array of %d", rec.Body, len(ids))
		}
		for i, a := range as {
			if a.ID != ids[i] || a.Result != "["+strconv.Itoa(i)+"]" {
				t.Errorf("response %d: id %s result %s, want id %s result [%d]", i, a.ID, a.Result, ids[i], i)
			}
		}
	})
}

func TestMethodsNeverDispatched(t *testing.T) {
	tests := []struct {
		name, method string
		reserved     bool
	}{
		{name: "empty", method: ``},
		{name: "empty token", method: `a..b`},
		{name: "trailing dot", method: `math.`},
		{name: "star wildcard", method: `math.*`},
		{name: "full wildcard", method: `>`},
		{name: "space", method: `a b`},
		{name: "non-ASCII", method: `caf\u00e9`},
		{name: "control", method: `a\u0000b`},
		{name: "too long", method: strings.Repeat("a", schema.MaxMethodBytes+1)},
		{name: "rpc.discover", method: `rpc.discover`, reserved: true},
		{name: "rpc.jobs.get", method: `rpc.jobs.get`, reserved: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t)
			body := `[{"jsonrpc":"2.0","method":"` + tt.method + `","id":1},` +
				`{"jsonrpc":"2.0","method":"` + tt.method + `"},` +
				`{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}]`
			rec := serve(s.Handler(), post(body))
			batch, as := decode(t, rec.Body.Bytes())
			if !batch || len(as) != 2 {
				t.Fatalf("answer %s: want an array of 2", rec.Body)
			}
			if as[0].ID != "1" || as[0].Code != schema.CodeMethodNotFound {
				t.Errorf("response 0: id %s code %d, want id 1 code -32601", as[0].ID, as[0].Code)
			}
			wantReason := "invalid_method_name"
			if tt.reserved {
				wantReason = "reserved"
			}
			if as[0].Data["reason"] != wantReason {
				t.Errorf("response 0 data %v, want reason %q", as[0].Data, wantReason)
			}
			if as[1].ID != "2" || as[1].Result != "[2]" {
				t.Errorf("response 1: id %s result %s, want id 2 result [2]", as[1].ID, as[1].Result)
			}
			if got := methods(f.dispatched()); !slices.Equal(got, []string{"echo"}) {
				t.Errorf("dispatched %q, want only echo", got)
			}
		})
	}
	t.Run("invalid notification alone", func(t *testing.T) {
		s, f := newServer(t)
		rec := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"rpc.x"}`))
		if rec.Code != http.StatusNoContent {
			t.Errorf("status %d, want 204", rec.Code)
		}
		if n := f.dispatches(); n != 0 {
			t.Errorf("Dispatch called %d times, want 0", n)
		}
	})
}

func TestLimits(t *testing.T) {
	small := Limits{MaxBodyBytes: 200, MaxBatchItems: 3, MaxDepth: 4}
	big := `{"jsonrpc":"2.0","method":"echo","params":["` + strings.Repeat("x", 300) + `"],"id":1}`
	tests := []struct {
		name       string
		body       string
		chunked    bool // hide the length, so the limit trips while reading
		wantStatus int
		wantLimit  string // "" when the request is within every limit
	}{
		{name: "body over limit", body: big, wantStatus: 413, wantLimit: "max_body_bytes"},
		{name: "chunked body over limit", body: big, chunked: true, wantStatus: 413, wantLimit: "max_body_bytes"},
		{name: "body at limit", body: echoOfSize(200), wantStatus: 200},
		{name: "chunked body at limit", body: echoOfSize(200), chunked: true, wantStatus: 200},
		{name: "body one over limit", body: echoOfSize(201), wantStatus: 413, wantLimit: "max_body_bytes"},
		{name: "batch over limit", body: `[1,2,3,4]`, wantStatus: 200, wantLimit: "max_batch_items"},
		{name: "batch at limit", body: `[1,2,3]`, wantStatus: 200},
		{name: "too deep", body: `{"jsonrpc":"2.0","method":"echo","params":[[[[1]]]],"id":1}`,
			wantStatus: 200, wantLimit: "max_depth"},
		{name: "depth at limit", body: `{"jsonrpc":"2.0","method":"echo","params":[[[1]]],"id":1}`, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f := newServer(t, WithLimits(small))
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length from NewRequest
			}
			r := httptest.NewRequest(http.MethodPost, "/rpc", body)
			r.Header.Set("Content-Type", "application/json")
			if tt.chunked && r.ContentLength != -1 {
				t.Fatalf("ContentLength = %d, want -1", r.ContentLength)
			}
			rec := serve(s.Handler(), r)
			if rec.Code != tt.wantStatus {
				t.Fatalf("POST %d bytes = %d %s, want %d", len(tt.body), rec.Code, rec.Body, tt.wantStatus)
			}
			batch, as := decode(t, rec.Body.Bytes())
			if tt.wantLimit == "" {
				for _, a := range as {
					if a.Code == schema.CodeLimitExceeded {
						t.Errorf("answer %s: limit error within limits", rec.Body)
					}
				}
				return
			}
			if batch || len(as) != 1 {
				t.Fatalf("answer %s: want one response object", rec.Body)
			}
			if as[0].Code != schema.CodeLimitExceeded || as[0].ID != "null" || as[0].Data["limit"] != tt.wantLimit {
				t.Errorf("answer %s: code %d id %s data %v, want -32006, null id, limit %q",
					rec.Body, as[0].Code, as[0].ID, as[0].Data, tt.wantLimit)
			}
			// The message names the flag that raises the limit.
			if flag := "--" + strings.ReplaceAll(tt.wantLimit, "_", "-"); !strings.Contains(rec.Body.String(), flag) {
				t.Errorf("answer %s: want the message to name %s", rec.Body, flag)
			}
			if n := f.dispatches(); n != 0 {
				t.Errorf("Dispatch called %d times, want 0", n)
			}
		})
	}
}

// echoOfSize returns an echo request of exactly n bytes.
func echoOfSize(n int) string {
	const head, tail = `{"jsonrpc":"2.0","method":"echo","params":["`, `"],"id":1}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// TestDefaultLimits checks the defaults are the documented ones.
func TestDefaultLimits(t *testing.T) {
	s, _ := newServer(t)
	want := Limits{MaxBodyBytes: 4 << 20, MaxBatchItems: 1000, MaxDepth: 64}
	if s.cfg.limits != want {
		t.Errorf("default limits = %+v, want %+v", s.cfg.limits, want)
	}
	items := strings.Repeat(`1,`, 1000) + `1`
	rec := serve(s.Handler(), post(`[`+items+`]`))
	a := decodeOne(t, rec.Body.Bytes())
	if a.Data["limit"] != "max_batch_items" {
		t.Errorf("1001 items: data %v, want limit max_batch_items", a.Data)
	}
}

// TestDispatcherFaults checks that a dispatcher breaking its contract never
// turns into a null success.
func TestDispatcherFaults(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []answer // ID, Result, Code
	}{
		{
			name: "neither result nor error",
			body: `[{"jsonrpc":"2.0","method":"bad.empty","id":1},{"jsonrpc":"2.0","method":"echo","params":[1],"id":2}]`,
			want: []answer{{ID: "1", Code: schema.CodeInternal}, {ID: "2", Result: "[1]"}},
		},
		{
			name: "both result and error",
			body: `{"jsonrpc":"2.0","method":"bad.both","id":"x"}`,
			want: []answer{{ID: `"x"`, Code: schema.CodeToolError}},
		},
		{
			// The server collects a batch's answers as they come, so
			// the call left unanswered gets -32603 and the others keep
			// theirs.
			name: "a call left unanswered",
			body: `[{"jsonrpc":"2.0","method":"echo","id":1},{"jsonrpc":"2.0","method":"bad.short","id":2},{"jsonrpc":"2.0","method":"echo"},{"foo":1}]`,
			want: []answer{{ID: "1", Result: "null"}, {ID: "2", Code: schema.CodeInternal}, {ID: "null", Code: schema.CodeInvalidRequest}},
		},
		{
			name: "panic",
			body: `[{"jsonrpc":"2.0","method":"echo","id":1},{"jsonrpc":"2.0","method":"bad.panic","id":2}]`,
			want: []answer{{ID: "1", Code: schema.CodeInternal}, {ID: "2", Code: schema.CodeInternal}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newServer(t)
			rec := serve(s.Handler(), post(tt.body))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", rec.Code)
			}
			_, got := decode(t, rec.Body.Bytes())
			if len(got) != len(tt.want) {
				t.Fatalf("answer %s: %d responses, want %d", rec.Body, len(got), len(tt.want))
			}
			for i, w := range tt.want {
				if got[i].ID != w.ID || got[i].Result != w.Result || got[i].Code != w.Code {
					t.Errorf("response %d = id %s result %q code %d, want id %s result %q code %d",
						i, got[i].ID, got[i].Result, got[i].Code, w.ID, w.Result, w.Code)
				}
			}
		})
	}
}

// TestToolErrorPassesThrough checks a tool's own code and data reach the
// client unchanged.
func TestToolErrorPassesThrough(t *testing.T) {
	s, _ := newServer(t)
	rec := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"fail","id":1}`))
	var got struct {
		Error schema.Error `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	if got.Error.Code != 2001 || got.Error.Message != "business rule" || string(got.Error.Data) != `{"why":"closed"}` {
		t.Errorf("error = %+v (data %s), want code 2001, message %q, data %s",
			got.Error, got.Error.Data, "business rule", `{"why":"closed"}`)
	}
}

// TestClientCancel checks that a client going away cancels the context the
// dispatcher runs under.
func TestClientCancel(t *testing.T) {
	s, f := newServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/rpc",
		strings.NewReader(`{"jsonrpc":"2.0","method":"block","id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-f.entered
	cancel()
	if err := <-f.ctxErrs; !errors.Is(err, context.Canceled) {
		t.Errorf("dispatcher context error = %v, want %v", err, context.Canceled)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client Do error = %v, want %v", err, context.Canceled)
	}
}

// TestOverTheWire sends a batch through a real HTTP server to check the
// headers a client sees.
func TestOverTheWire(t *testing.T) {
	s, _ := newServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	body := `[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"echo","params":{"a":[true]},"id":"b"}]`
	resp, err := ts.Client().Post(ts.URL+"/rpc", "application/json; charset=utf-8", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := readAll(t, resp.Body)
	want := `[{"jsonrpc":"2.0","result":3,"id":1},{"jsonrpc":"2.0","result":{"a":[true]},"id":"b"}]`
	if resp.StatusCode != 200 || string(got) != want {
		t.Errorf("POST /rpc = %d %s, want 200 %s", resp.StatusCode, got, want)
	}
	if resp.ContentLength != int64(len(want)) {
		t.Errorf("Content-Length = %d, want %d", resp.ContentLength, len(want))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
}

// TestRequestLog checks one log line per request, with what it carried,
// when the access log is on.
func TestRequestLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, _ := newServer(t, WithLogger(log), WithAccessLog(true))
	serve(s.Handler(), post(`[{"jsonrpc":"2.0","method":"echo","id":1},{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"fail","id":2}]`))
	serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/rpc", nil))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log has %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"status": 200.0, "items": 3.0, "calls": 3.0, "errors": 1.0, "component": "ingress"} {
		if first[k] != want {
			t.Errorf("first line %s = %v, want %v", k, first[k], want)
		}
	}
	if _, ok := first["duration_ms"]; !ok {
		t.Errorf("first line %v has no duration", first)
	}
	if second["status"] != 405.0 {
		t.Errorf("second line status = %v, want 405", second["status"])
	}
}

// TestRequestLogOffByDefault checks that without the access log nothing is
// logged per request at level Info, and that the request line is there at
// level Debug.
func TestRequestLogOffByDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  int
	}{
		{"info", slog.LevelInfo, 0},
		{"debug", slog.LevelDebug, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			s, _ := newServer(t, WithLogger(log))
			serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"echo","id":1}`))
			if got := strings.Count(buf.String(), `"msg":"rpc"`); got != tc.want {
				t.Errorf("request lines at level %s = %d, want %d:\n%s", tc.level, got, tc.want, buf.String())
			}
		})
	}
}

func BenchmarkRPC(b *testing.B) {
	var batch strings.Builder
	batch.WriteByte('[')
	for i := range 100 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`{"jsonrpc":"2.0","method":"echo","params":{"n":` + strconv.Itoa(i) + `},"id":` + strconv.Itoa(i) + `}`)
	}
	batch.WriteByte(']')
	for _, bm := range []struct {
		name, body string
		opts       []Option
	}{
		{"echo", echo, nil},
		{"batch100", batch.String(), nil},
		{"echo-fair", echo, []Option{WithFairness(Fairness{})}},
		{"batch100-fair", batch.String(), []Option{WithFairness(Fairness{})}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			s, _ := newServer(b, bm.opts...)
			h := s.Handler()
			body := []byte(bm.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/rpc", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d, want 200", rec.Code)
				}
			}
		})
	}
}
