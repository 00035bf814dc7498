package demo_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/egress/egresstest"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startDemo serves the demo tools on an embedded server and returns the
// caller's connection.
func startDemo(t *testing.T, opts ...demo.Option) *nats.Conn {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	wnc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	cnc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	rt, err := worker.New(wnc, worker.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(rt, opts...); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return cnc
}

func call(t *testing.T, nc *nats.Conn, method, params string, timeout time.Duration) *schema.ReplyEnvelope {
	t.Helper()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call(method)
	if err != nil {
		t.Fatal(err)
	}
	env := &schema.CallEnvelope{ID: []byte("1"), Method: method}
	if params != "" {
		env.Params = []byte(params)
	}
	msg, err := bus.CallMsg(subject, env, time.Now().Add(timeout), "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nc.RequestMsg(msg, timeout+10*time.Second)
	if err != nil {
		t.Fatalf("call %s %s: %v", method, params, err)
	}
	r, err := bus.ReadReply(resp)
	if err != nil {
		t.Fatalf("call %s %s: %v", method, params, err)
	}
	return r
}

// check compares a reply with a wanted result (exact JSON), or with a wanted
// error code and, for invalid params, the member the error names.
func check(t *testing.T, r *schema.ReplyEnvelope, wantResult string, wantCode int, wantField string) {
	t.Helper()
	e := r.Err()
	if wantCode == 0 {
		if e != nil {
			t.Fatalf("reply = error %d %q %s, want result %s", e.Code, e.Message, e.Data, wantResult)
		}
		if string(r.Result) != wantResult {
			t.Errorf("result = %s, want %s", r.Result, wantResult)
		}
		return
	}
	if e == nil {
		t.Fatalf("reply = result %s, want error %d", r.Result, wantCode)
	}
	if e.Code != wantCode {
		t.Fatalf("error = %d %q %s, want %d", e.Code, e.Message, e.Data, wantCode)
	}
	if wantField != "" {
		var data struct{ Field string }
		if err := json.Unmarshal(e.Data, &data); err != nil || data.Field != wantField {
			t.Errorf("error data = %s, want field %q", e.Data, wantField)
		}
	}
}

func digest(data string, rounds int) string {
	sum := sha256.Sum256([]byte(data))
	for range rounds - 1 {
		sum = sha256.Sum256(sum[:])
	}
	return hex.EncodeToString(sum[:])
}

func TestTools(t *testing.T) {
	nc := startDemo(t)
	tests := []struct {
		name, method, params string
		want                 string // the exact result when code is 0
		code                 int
		field                string
	}{
		{name: "echo object byte for byte", method: "echo", params: `{"b" : [1, 2.50],  "a":"\u00e9"}`, want: `{"b" : [1, 2.50],  "a":"\u00e9"}`},
		{name: "echo array", method: "echo", params: `[12345678901234567890]`, want: `[12345678901234567890]`},
		{name: "echo nothing", method: "echo", want: `null`},

		{name: "sleep", method: "sleep", params: `{"ms":10}`, want: `{"slept_ms":10}`},
		{name: "sleep zero", method: "sleep", params: `{"ms":0}`, want: `{"slept_ms":0}`},
		{name: "sleep negative", method: "sleep", params: `{"ms":-1}`, code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep absurd", method: "sleep", params: `{"ms":99999999999}`, code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep not a number", method: "sleep", params: `{"ms":"10"}`, code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep fraction", method: "sleep", params: `{"ms":1.5}`, code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep without ms", method: "sleep", params: `{}`, code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep unknown member", method: "sleep", params: `{"ms":1,"s":1}`, code: schema.CodeInvalidParams, field: "/s"},
		{name: "sleep without params", method: "sleep", code: schema.CodeInvalidParams, field: "/ms"},
		{name: "sleep null ms", method: "sleep", params: `{"ms":null}`, code: schema.CodeInvalidParams, field: "/ms"},

		{name: "fail default", method: "fail", params: `{"message":"boom"}`, code: schema.CodeToolError},
		{name: "fail without params", method: "fail", code: schema.CodeToolError},
		{name: "fail of an empty object", method: "fail", params: `{}`, code: schema.CodeToolError},
		{name: "fail invalid params code", method: "fail", params: `{"code":-32602}`, code: schema.CodeInvalidParams},

		{name: "sha256", method: "sha256", params: `{"data":"abc"}`,
			want: `{"digest":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","rounds":1}`},
		{name: "sha256 rounds", method: "sha256", params: `{"data":"abc","rounds":1000}`,
			want: `{"digest":"` + digest("abc", 1000) + `","rounds":1000}`},
		{name: "sha256 too many rounds", method: "sha256", params: `{"data":"abc","rounds":10000001}`, code: schema.CodeInvalidParams, field: "/rounds"},
		{name: "sha256 negative rounds", method: "sha256", params: `{"data":"abc","rounds":-1}`, code: schema.CodeInvalidParams, field: "/rounds"},
		{name: "sha256 without data", method: "sha256", params: `{"rounds":2}`, code: schema.CodeInvalidParams, field: "/data"},
		{name: "sha256 of empty data", method: "sha256", params: `{"data":""}`,
			want: `{"digest":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","rounds":1}`},

		{name: "fetch_page without url", method: "fetch_page", params: `{}`, code: schema.CodeInvalidParams, field: "/url"},
		{name: "fetch_page of an empty url", method: "fetch_page", params: `{"url":""}`, code: schema.CodeInvalidParams, field: "/url"},

		{name: "subtract positional", method: "subtract", params: `[42, 23]`, want: `19`},
		{name: "subtract positional reversed", method: "subtract", params: `[23, 42]`, want: `-19`},
		{name: "subtract named", method: "subtract", params: `{"subtrahend": 23, "minuend": 42}`, want: `19`},
		{name: "subtract named reversed", method: "subtract", params: `{"minuend": 23, "subtrahend": 42}`, want: `-19`},
		{name: "subtract floats", method: "subtract", params: `[2.5, 1]`, want: `1.5`},
		{name: "subtract overflow goes float", method: "subtract", params: `[-9223372036854775808, 1]`, want: `-9223372036854776000`},
		{name: "subtract one value", method: "subtract", params: `[42]`, code: schema.CodeInvalidParams},
		{name: "subtract string", method: "subtract", params: `["42", 1]`, code: schema.CodeInvalidParams, field: "/0"},
		{name: "subtract missing member", method: "subtract", params: `{"minuend": 42}`, code: schema.CodeInvalidParams, field: "/subtrahend"},
		{name: "subtract unknown member", method: "subtract", params: `{"minuend": 42, "subtrahend": 1, "x": 0}`, code: schema.CodeInvalidParams, field: "/x"},
		{name: "subtract without params", method: "subtract", code: schema.CodeInvalidParams},

		{name: "sum", method: "sum", params: `[1,2,4]`, want: `7`},
		{name: "sum empty", method: "sum", params: `[]`, want: `0`},
		{name: "sum not numbers", method: "sum", params: `[1,"2"]`, code: schema.CodeInvalidParams, field: "/1"},
		{name: "sum object", method: "sum", params: `{"a":1}`, code: schema.CodeInvalidParams},

		{name: "get_data", method: "get_data", want: `["hello",5]`},
		{name: "update", method: "update", params: `[1,2,3,4,5]`, want: `null`},
		{name: "notify_hello", method: "notify_hello", params: `[7]`, want: `null`},
		{name: "notify_sum", method: "notify_sum", params: `[1,2,4]`, want: `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, call(t, nc, tc.method, tc.params, 10*time.Second), tc.want, tc.code, tc.field)
		})
	}
}

func TestFailPassesThrough(t *testing.T) {
	nc := startDemo(t)
	r := call(t, nc, "fail", `{"code": 2001, "message": "insufficient funds", "data": {"balance" : 3, "need": [10]}}`, 10*time.Second)
	want := &schema.Error{Code: 2001, Message: "insufficient funds", Data: json.RawMessage(`{"balance" : 3, "need": [10]}`)}
	got := r.Err()
	if got == nil || got.Code != want.Code || got.Message != want.Message || string(got.Data) != string(want.Data) {
		t.Errorf("fail = %v %s, want %v %s", got, errData(got), want, want.Data)
	}
}

func errData(e *schema.Error) string {
	if e == nil {
		return ""
	}
	return string(e.Data)
}

func TestHonoursDeadline(t *testing.T) {
	nc := startDemo(t)
	for _, tc := range []struct{ name, method, params string }{
		{"sleep", "sleep", `{"ms":600000}`},
		{"sha256", "sha256", fmt.Sprintf(`{"data":"abc","rounds":%d}`, demo.MaxRounds)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := call(t, nc, tc.method, tc.params, 100*time.Millisecond)
			if got := r.Err(); !errors.Is(got, schema.ErrTimeout) {
				t.Errorf("reply = %v %s, want error %d", got, r.Result, schema.CodeTimeout)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the call took %v after its 100ms deadline", d)
			}
		})
	}
}

func TestFetchPage(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><html><head><title> Hello &amp;
			welcome </title><style>p { color: red }</style><script>var x = "<p>hidden</p>";</script></head>
			<body><h1>Heading</h1><p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>`)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("a", 3000))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `<title>Not found</title><p>nothing here</p>`)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	mux.HandleFunc("/inside", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/page", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	nats := egresstest.NATS(t)

	// A port that was free a moment ago refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String() + "/"
	l.Close()

	// The test's servers are on loopback, which the allowlist admits.
	nc := startDemo(t, demo.WithFetchAllow("127.0.0.1"), demo.WithFetchMaxBytes(1000), demo.WithFetchTimeout(300*time.Millisecond))
	fetch := func(t *testing.T, url string) *schema.ReplyEnvelope {
		t.Helper()
		params, _ := json.Marshal(map[string]string{"url": url})
		return call(t, nc, "fetch_page", string(params), 10*time.Second)
	}
	type page struct {
		Title      string `json:"title"`
		Content    string `json:"content"`
		StatusCode int    `json:"status_code"`
		Truncated  bool   `json:"truncated"`
		Limit      string `json:"limit"`
		MaxBytes   int64  `json:"max_bytes"`
	}
	for _, tc := range []struct {
		name string
		path string
		want page
	}{
		{"html", "/page", page{Title: "Hello & welcome", Content: "Heading\nSome bold text.\none\ntwo", StatusCode: 200}},
		{"size cap", "/big", page{Content: strings.Repeat("a", 1000), StatusCode: 200, Truncated: true, Limit: "max_fetch_bytes", MaxBytes: 1000}},
		{"error status", "/missing", page{Title: "Not found", Content: "nothing here", StatusCode: 404}},
		{"redirect to the same server", "/here", page{Title: "Hello & welcome", Content: "Heading\nSome bold text.\none\ntwo", StatusCode: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fetch(t, srv.URL+tc.path)
			if e := r.Err(); e != nil {
				t.Fatalf("fetch_page = error %d %q %s", e.Code, e.Message, e.Data)
			}
			var got page
			if err := json.Unmarshal(r.Result, &got); err != nil {
				t.Fatalf("result %s: %v", r.Result, err)
			}
			if got != tc.want {
				t.Errorf("fetch_page = %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		url    string
		code   int
		field  string
		reason string // data.reason, for tool errors
	}{
		{"no URL", "", schema.CodeInvalidParams, "/url", ""},
		{"bad URL", "http://[::1", schema.CodeInvalidParams, "/url", ""},
		{"no scheme", "127.0.0.1/page", schema.CodeInvalidParams, "/url", ""},
		{"file scheme", "file:///etc/passwd", schema.CodeInvalidParams, "/url", ""},
		{"ftp scheme", "ftp://127.0.0.1/x", schema.CodeInvalidParams, "/url", ""},
		{"no host", "http:///page", schema.CodeInvalidParams, "/url", ""},
		{"timeout", srv.URL + "/slow", schema.CodeToolError, "", "timeout"},
		{"connection refused", closedURL, schema.CodeToolError, "", "refused"},
		{"a NATS server's banner", "http://" + nats + "/", schema.CodeToolError, "", "protocol"},
		{"private address", "http://10.0.0.1/", schema.CodeInvalidParams, "/url", ""},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", schema.CodeInvalidParams, "/url", ""},
		{"IPv6 loopback, not allowed", "http://[::1]/", schema.CodeInvalidParams, "/url", ""},
		{"redirect to the metadata address", srv.URL + "/inside", schema.CodeToolError, "", "blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fetch(t, tc.url)
			check(t, r, "", tc.code, tc.field)
			if strings.Contains(r.Err().Message+string(r.Err().Data), "NBANNER") {
				t.Errorf("error = %q %s, holds the receiver's words", r.Err().Message, r.Err().Data)
			}
			if tc.code != schema.CodeToolError {
				return
			}
			var data struct{ URL, Reason string }
			if err := json.Unmarshal(r.Err().Data, &data); err != nil || data.URL != tc.url || data.Reason == "" {
				t.Errorf("error data = %s, want the url %s and a reason", r.Err().Data, tc.url)
			}
			if tc.reason != "" && data.Reason != tc.reason {
				t.Errorf("data.reason = %q, want %q", data.Reason, tc.reason)
			}
		})
	}
}

// TestFetchPageRefusesLoopback: without the allowlist, a page on loopback
// is refused, also through a name that resolves there, naming the rule and
// the flag that admits it; nothing is dialed.
func TestFetchPageRefusesLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("fetch_page reached %s, want it refused", r.URL)
	}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	resolve := resolverFunc(func(host string) ([]netip.Addr, error) {
		if host == "inside.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		t.Errorf("dialed %s, want nothing dialed", address)
		return nil, errors.New("test: no network")
	}
	nc := startDemo(t, demo.WithFetchNet(resolve, dial))
	for _, url := range []string{srv.URL + "/", "http://inside.test:" + port + "/", "http://[::ffff:127.0.0.1]:" + port + "/"} {
		params, _ := json.Marshal(map[string]string{"url": url})
		r := call(t, nc, "fetch_page", string(params), 10*time.Second)
		check(t, r, "", schema.CodeInvalidParams, "/url")
		if e := r.Err(); e == nil || !strings.Contains(e.Message, "loopback") || !strings.Contains(e.Message, "--fetch-allow") {
			t.Errorf("fetch_page(%s) = %v, want an error naming loopback and --fetch-allow", url, e)
		}
	}
}

type resolverFunc func(host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return f(host)
}

func TestRegister(t *testing.T) {
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
		opt  demo.Option
	}{
		{"bad allowlist entry", demo.WithFetchAllow("http://10.0.0.1/")},
		{"zero bytes", demo.WithFetchMaxBytes(0)},
		{"zero timeout", demo.WithFetchTimeout(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := worker.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if err := demo.Register(rt, tc.opt); err == nil {
				t.Errorf("Register = nil, want an error")
			}
		})
	}
	t.Run("twice", func(t *testing.T) {
		rt, err := worker.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := demo.Register(rt); err != nil {
			t.Fatal(err)
		}
		want := []string{"confirm", "echo", "fail", "fetch_page", "get_data", "notify_hello", "notify_sum", "sha256", "sleep", "subtract", "sum", "update"}
		if got := rt.Methods(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Methods() = %v, want %v", got, want)
		}
		if err := demo.Register(rt); !errors.Is(err, worker.ErrDuplicate) {
			t.Errorf("second Register = %v, want %v", err, worker.ErrDuplicate)
		}
	})
}

// TestDescriptors checks what the demo tools advertise: a one-line
// description each, retry safety only for the tools without effects, and
// fetch_page's own deadline a little past its request timeout.
func TestDescriptors(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt, err := worker.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(rt, demo.WithFetchTimeout(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	notRetrySafe := map[string]bool{"sleep": true, "confirm": true, "update": true, "notify_hello": true, "notify_sum": true}
	for _, d := range rt.Descriptors() {
		t.Run(d.Name, func(t *testing.T) {
			if d.Description == "" || strings.Contains(d.Description, "\n") {
				t.Errorf("description = %q, want one line", d.Description)
			}
			if d.RetrySafe == notRetrySafe[d.Name] {
				t.Errorf("RetrySafe = %v, want %v", d.RetrySafe, !notRetrySafe[d.Name])
			}
			if d.RetrySafe != rt.RetrySafe(d.Name) {
				t.Errorf("descriptor says RetrySafe %v, the runtime %v", d.RetrySafe, rt.RetrySafe(d.Name))
			}
			want := time.Duration(0)
			if d.Name == "fetch_page" {
				want = 5 * time.Second
			}
			if d.Timeout() != want {
				t.Errorf("Timeout() = %v, want %v", d.Timeout(), want)
			}
		})
	}
}

// askedCall sends a call of confirm as a job's runner does, with a
// heartbeat and an ask key, answers its question with answer (its id
// filled in), and returns the question and the reply.
func askedCall(t *testing.T, nc *nats.Conn, params string, answer schema.Answer) (schema.Question, *schema.ReplyEnvelope) {
	t.Helper()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call("confirm")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := bus.CallMsg(subject, &schema.CallEnvelope{ID: []byte(`"job-1"`), Method: "confirm", Params: []byte(params)}, time.Now().Add(time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	key := schema.NewAskKey()
	msg.Header.Set(schema.HeaderHeartbeat, "50")
	msg.Header.Set(schema.HeaderAskKey, key.String())
	msg.Reply = nc.NewInbox()
	sub, err := nc.SubscribeSync(msg.Reply)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	var q schema.Question
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("confirm %s: %v", params, err)
		}
		switch m.Header.Get(schema.HeaderProgress) {
		case schema.ProgressQuestion:
			if q.ID != "" {
				continue // asked again while the answer travels
			}
			if q, err = schema.UnmarshalQuestion(m.Data); err != nil {
				t.Fatal(err)
			}
			answer.ID = q.ID
			reply := m.Header.Get(schema.HeaderAskReply)
			body, err := schema.SealAnswer(key, reply, answer)
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish(reply, body); err != nil {
				t.Fatal(err)
			}
		case "":
			r, err := bus.ReadReply(m)
			if err != nil {
				t.Fatal(err)
			}
			return q, r
		}
	}
}

func TestConfirm(t *testing.T) {
	nc := startDemo(t)
	question := `{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`
	for _, tc := range []struct {
		name   string
		answer schema.Answer
		want   string
		code   int
	}{
		{name: "confirmed", answer: schema.Answer{Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":true}`)},
			want: `{"action":"deploy","confirmed":true}`},
		{name: "not confirmed", answer: schema.Answer{Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":false}`)},
			want: `{"action":"deploy","confirmed":false}`},
		{name: "declined", answer: schema.Answer{Action: schema.AskDecline},
			want: `{"action":"deploy","confirmed":false,"declined":true}`},
		{name: "dismissed", answer: schema.Answer{Action: schema.AskCancel}, code: schema.CodeCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, r := askedCall(t, nc, `{"action":"deploy"}`, tc.answer)
			if q.Message != "proceed with deploy?" || string(q.Schema) != question {
				t.Errorf("question %q %s, want %q %s", q.Message, q.Schema, "proceed with deploy?", question)
			}
			check(t, r, tc.want, tc.code, "")
		})
	}
}

// TestConfirmSynchronous: a call that cannot be asked fails at once,
// saying to run the tool as a job.
func TestConfirmSynchronous(t *testing.T) {
	nc := startDemo(t)
	r := call(t, nc, "confirm", `{"action":"deploy"}`, time.Minute)
	e := r.Err()
	if e == nil || e.Code != schema.CodeToolError || e.Reason() != schema.ReasonCannotAsk || !strings.Contains(e.Message, schema.MethodJobsSubmit) {
		t.Fatalf("confirm = %s %v, want -32000 %s naming %s", r.Result, e, schema.ReasonCannotAsk, schema.MethodJobsSubmit)
	}
	for _, tc := range []struct{ name, params string }{
		{"no action", `{}`},
		{"an empty action", `{"action":""}`},
		{"an action too long", `{"action":"` + strings.Repeat("a", demo.MaxActionBytes+1) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, call(t, nc, "confirm", tc.params, time.Minute), "", schema.CodeInvalidParams, "/action")
		})
	}
}
