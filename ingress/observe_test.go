package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/schema"
)

// TestMetricsMoveAsCallsFlow checks the counters, histograms and gauges of
// /metrics after calls that succeed, fail, time out and are refused.
func TestMetricsMoveAsCallsFlow(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newServer(t, WithMetrics(reg))
	h := s.Handler()

	serve(h, post(`[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},
		{"jsonrpc":"2.0","method":"echo","params":[2],"id":2},
		{"jsonrpc":"2.0","method":"fail","id":3},
		{"jsonrpc":"2.0","method":"error","params":{"code":-32001},"id":4},
		{"jsonrpc":"2.0","method":"echo"},
		{"jsonrpc":"2.0","method":"bad..name","id":5}]`))
	serve(h, post(`{"jsonrpc":"2.0","method":"echo","id":6}`))

	m := s.metrics
	for _, c := range []struct {
		method, code string
		want         float64
	}{
		{"echo", "ok", 3},
		{"echo", "notification", 1},
		{"fail", "2001", 1},
		{"error", "-32001", 1},
		{labelInvalid, "-32601", 1},
	} {
		if got := testutil.ToFloat64(m.calls.WithLabelValues(c.method, c.code)); got != c.want {
			t.Errorf("calls_total{method=%q,code=%q} = %v, want %v", c.method, c.code, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.timeouts.WithLabelValues("error")); got != 1 {
		t.Errorf("timeouts_total{error} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.inFlight.WithLabelValues("echo")); got != 0 {
		t.Errorf("in_flight{echo} = %v after every answer, want 0", got)
	}
	if n := testutil.CollectAndCount(m.duration); n != 3 { // echo, fail, error
		t.Errorf("duration series = %d, want 3", n)
	}
	if s.inFlight.Load() != 0 {
		t.Errorf("in flight %d, want 0", s.inFlight.Load())
	}

	// The route serves it all, without credentials even when auth is on.
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`toolbus_ingress_calls_total{code="ok",method="echo"} 3`,
		`toolbus_ingress_batch_size_count 2`,
		`toolbus_ingress_call_duration_seconds_count{method="echo"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestMetricsOpenWithAuth(t *testing.T) {
	s, _ := newServer(t, WithMetrics(prometheus.NewRegistry()),
		WithAuth(auth.Config{Keys: []auth.APIKey{{Name: "alice", SHA256: auth.HashAPIKey("k"), Allow: []string{">"}}}}))
	if rec := serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/metrics", nil)); rec.Code != http.StatusOK {
		t.Fatalf("/metrics without credentials: %d, want 200", rec.Code)
	}
	if rec := serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/ui/", nil)); rec.Code != http.StatusOK {
		t.Fatalf("/ui/ without credentials: %d, want 200", rec.Code)
	}
	if rec := serve(s.Handler(), httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)); rec.Code != http.StatusUnauthorized {
		t.Fatalf("/ui/api/state without credentials: %d, want 401", rec.Code)
	}
	r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
	r.Header.Set("Authorization", "Bearer k")
	if rec := serve(s.Handler(), r); rec.Code != http.StatusOK {
		t.Fatalf("/ui/api/state with a key: %d, want 200", rec.Code)
	}
}

// TestMethodLabelsBounded checks that made-up method names cannot grow the
// metrics without bound.
func TestMethodLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newServer(t, WithMetrics(reg))
	s.labels.Max = 5
	var b strings.Builder
	b.WriteString("[")
	for i := range 20 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","method":"made.up%d","id":%d}`, i, i)
	}
	b.WriteString("]")
	serve(s.Handler(), post(b.String()))
	if n := testutil.CollectAndCount(s.metrics.calls); n != 6 {
		t.Fatalf("calls_total has %d series, want 5 names and %s", n, labelOther)
	}
	if got := testutil.ToFloat64(s.metrics.calls.WithLabelValues(labelOther, "-32601")); got != 15 {
		t.Fatalf("%s counts %v calls, want 15", labelOther, got)
	}
}

func newRecorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}

// TestTraceSpansAndPropagation checks the batch and call spans, the
// traceparent handed to the dispatcher with each call, an incoming
// traceparent being joined, and the trace id in error data.
func TestTraceSpansAndPropagation(t *testing.T) {
	rec, tp := newRecorder()
	defer tp.Shutdown(context.Background())
	s, f := newServer(t, WithTracerProvider(tp))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := serve(s.Handler(), post(`[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},
		{"jsonrpc":"2.0","method":"fail","id":2},
		{"jsonrpc":"2.0","method":"error","params":{"code":-32000},"id":3}]`, "traceparent", parent))
	_, got := decode(t, resp.Body.Bytes())

	spans := rec.Ended()
	var batch sdktrace.ReadOnlySpan
	calls := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		switch {
		case sp.Name() == "toolbus.batch":
			batch = sp
		case strings.HasPrefix(sp.Name(), "toolbus.call "):
			calls[strings.TrimPrefix(sp.Name(), "toolbus.call ")] = sp
		}
	}
	if batch == nil || len(calls) != 3 {
		t.Fatalf("spans %v: want a batch span and 3 call spans", names(spans))
	}
	if tid := batch.SpanContext().TraceID().String(); tid != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("batch trace id %s: the incoming traceparent was not joined", tid)
	}
	if batch.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("batch parent %s, want the caller's span", batch.Parent().SpanID())
	}
	for m, sp := range calls {
		if sp.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("call span %s is not a child of the batch span", m)
		}
	}
	if calls["fail"].Status().Code.String() != "Error" {
		t.Errorf("failed call's span status %v, want Error", calls["fail"].Status())
	}

	// Each dispatched call carries its own span's traceparent.
	for _, c := range f.dispatched() {
		sp := calls[c.Method]
		want := fmt.Sprintf("00-%s-%s-01", sp.SpanContext().TraceID(), sp.SpanContext().SpanID())
		if c.TraceParent != want {
			t.Errorf("%s dispatched with traceparent %q, want %q", c.Method, c.TraceParent, want)
		}
	}
	// The trace id is added to error data that is an object, and a tool's
	// own data of another type is left alone.
	if got[1].Data["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || got[1].Data["why"] != "closed" {
		t.Errorf("fail's data %v, want its own members and trace_id", got[1].Data)
	}
	if got[2].Data["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("error without data: %v, want data with trace_id", got[2].Data)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func TestWithTraceID(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
	})
	tid := sc.TraceID().String()
	for _, c := range []struct{ data, want string }{
		{``, `{"trace_id":"` + tid + `"}`},
		{`null`, `{"trace_id":"` + tid + `"}`},
		{`{}`, `{"trace_id":"` + tid + `"}`},
		{`{"a":1}`, `{"trace_id":"` + tid + `","a":1}`},
		{` { "a" : 1 } `, `{"trace_id":"` + tid + `","a" : 1 }`},
		{`{"trace_id":"mine"}`, `{"trace_id":"mine"}`},
		{`"text"`, `"text"`},
		{`[1]`, `[1]`},
	} {
		e := &schema.Error{Code: 1, Message: "m", Data: json.RawMessage(c.data)}
		got := withTraceID(e, sc)
		if string(got.Data) != c.want && !(c.want == c.data && got == e) {
			t.Errorf("data %q: got %q, want %q", c.data, got.Data, c.want)
		}
		if !json.Valid(got.Data) && len(got.Data) > 0 {
			t.Errorf("data %q became invalid JSON %q", c.data, got.Data)
		}
		if string(e.Data) != c.data {
			t.Errorf("the original error was changed")
		}
	}
	if e := (&schema.Error{Code: 1}); withTraceID(e, trace.SpanContext{}) != e {
		t.Error("an untraced call's error must stay as it is")
	}
}

// TestMessageLog checks that bodies are logged for the chosen methods only,
// with the configured fields redacted at any depth and long bodies cut.
func TestMessageLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	_, tp := newRecorder()
	s, _ := newServer(t, WithLogger(log), WithTracerProvider(tp), WithMessageLog(msglog.Config{
		Methods: []string{"echo"}, MaxBytes: 120, Redact: []string{"password", "Token"},
	}))
	serve(s.Handler(), post(`[{"jsonrpc":"2.0","method":"echo","params":{"user":"ann","password":"hunter2","nested":[{"token":"t0ps3cret"}],"n":12345678901234567890},"id":1},
		{"jsonrpc":"2.0","method":"echo","params":{"long":"`+strings.Repeat("x", 300)+`"},"id":2},
		{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":3}]`))
	out := buf.String()
	if strings.Contains(out, "hunter2") || strings.Contains(out, "t0ps3cret") {
		t.Fatalf("a redacted value was logged:\n%s", out)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "message" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 4 { // echo 1 and 2, each request and response; sum is not logged
		t.Fatalf("%d message lines, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if l["method"] != "echo" || l["trace_id"] == nil || l["trace_id"] == "" || l["id"] == nil {
			t.Errorf("line %v lacks method, id or trace_id", l)
		}
	}
	first, _ := json.Marshal(lines[0]["body"])
	if !strings.Contains(string(first), `"password":"[REDACTED]"`) || !strings.Contains(string(first), `"token":"[REDACTED]"`) ||
		!strings.Contains(out, `"n":12345678901234567890`) || !strings.Contains(string(first), `"user":"ann"`) {
		t.Errorf("redacted body %s", first)
	}
	var cut map[string]any
	for _, l := range lines {
		if l["id"] == "2" && l["direction"] == "request" {
			cut = l
		}
	}
	if cut == nil || cut["truncated"] != true || len(cut["body"].(string)) != 120 || cut["body_bytes"].(float64) < 200 {
		t.Errorf("long body line %v, want 120 bytes, truncated and its full size", cut)
	}
}

func TestMessageLogOptionError(t *testing.T) {
	if _, err := New(newFake(), WithMessageLog(msglog.Config{Methods: []string{"bad..name"}})); err == nil {
		t.Error("WithMessageLog(a bad pattern) accepted")
	}
}

// TestDashboardState checks what /ui/api/state reports after some calls,
// and that the page is served.
func TestDashboardState(t *testing.T) {
	s, _ := newServer(t, WithJobStats(func(ctx context.Context, _ dashboard.JobsQuery) (dashboard.JobsState, error) {
		p := 40.0
		return dashboard.JobsState{ByState: map[string]int{"running": 1}, Recent: []dashboard.JobState{{ID: "j1", Method: "sleep", State: "running", Percent: &p}}}, nil
	}))
	h := s.Handler()
	serve(h, post(`[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},{"jsonrpc":"2.0","method":"fail","id":"f"}]`))
	rec := serve(h, httptest.NewRequest(http.MethodGet, "/ui/api/state", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("state: %d", rec.Code)
	}
	var st dashboard.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Methods) != 2 || st.Methods[0].Method != "echo" || st.Methods[0].Total != 1 || st.Methods[1].ErrorRate != 1 {
		t.Errorf("methods %+v", st.Methods)
	}
	if len(st.RecentErrors) != 1 || st.RecentErrors[0].ID != `"f"` || st.RecentErrors[0].Code != 2001 {
		t.Errorf("recent errors %+v", st.RecentErrors)
	}
	if st.Jobs == nil || st.Jobs.ByState["running"] != 1 || len(st.Jobs.Recent) != 1 {
		t.Errorf("jobs %+v", st.Jobs)
	}
	if st.Discovery || st.Methods[0].Workers != nil {
		t.Errorf("without discovery, workers must be unknown: %+v", st)
	}
	page := serve(h, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), "<html") {
		t.Errorf("/ui/: %d %.100s", page.Code, page.Body)
	}
	off, _ := newServer(t, WithDashboard(false))
	if rec := serve(off.Handler(), httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)); rec.Code != http.StatusNotFound {
		t.Errorf("dashboard off: state answered %d, want 404", rec.Code)
	}
}

// TestTraceContextPassedWithTracingOff checks that an ingress recording no
// spans still hands the caller's trace context to the workers and names
// its trace in error data.
func TestTraceContextPassedWithTracingOff(t *testing.T) {
	s, f := newServer(t, WithTracerProvider(noop.NewTracerProvider()))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"fail","id":1}`, "traceparent", parent))
	if got := decodeOne(t, resp.Body.Bytes()); got.Data["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("error data %v, want the caller's trace id", got.Data)
	}
	if calls := f.dispatched(); len(calls) != 1 || calls[0].TraceParent != parent {
		t.Errorf("dispatched %+v, want the caller's traceparent passed on", calls)
	}
	// Without a caller's trace there is nothing to pass on.
	serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"echo","id":2}`))
	if calls := f.dispatched(); calls[len(calls)-1].TraceParent != "" {
		t.Errorf("untraced call dispatched with traceparent %q", calls[len(calls)-1].TraceParent)
	}
}

// TestFailedValueHidden checks that an invalid-params answer about a
// redacted member, whose reason may quote the value, is kept with the
// value hidden in the message log and the recent errors, while the
// client gets it whole.
func TestFailedValueHidden(t *testing.T) {
	var buf bytes.Buffer
	s, _ := newServer(t, WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))),
		WithMessageLog(msglog.Config{Methods: []string{"error"}, Redact: []string{"password"}}))
	body := `{"jsonrpc":"2.0","method":"error","params":{"code":-32602,"data":{"field":"/user/password","reason":"'hunter2' does not match pattern"}},"id":1}`
	resp := serve(s.Handler(), post(body))
	if !strings.Contains(resp.Body.String(), "hunter2") {
		t.Fatalf("the client's answer was changed: %s", resp.Body)
	}
	// The request line hides nothing (the params hold no member named
	// password); the response line and the recent errors must.
	var resp2 []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"direction":"response"`) {
			resp2 = append(resp2, l)
		}
	}
	if len(resp2) != 1 || strings.Contains(resp2[0], "hunter2") || !strings.Contains(resp2[0], msglog.Redacted) {
		t.Errorf("response lines %q: want the failed value hidden", resp2)
	}
	errs := s.stats.RecentErrors()
	if len(errs) != 1 || strings.Contains(errs[0].Message, "hunter2") {
		t.Errorf("recent errors %+v: want the failed value hidden", errs)
	}
}

// TestNoWorkersCounted checks that a known method without workers (-32003
// no_workers) counts as a call no worker took.
func TestNoWorkersCounted(t *testing.T) {
	s, _ := newServer(t, WithMetrics(prometheus.NewRegistry()))
	serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"error","params":{"code":-32003,"data":{"reason":"no_workers"}},"id":1}`))
	if got := testutil.ToFloat64(s.metrics.noResponders.WithLabelValues("error")); got != 1 {
		t.Errorf("no_responders_total = %v, want 1", got)
	}
}

// TestLimitRefusalsCounted checks that every answer naming a limit, from
// the dispatcher or from admission, is counted under that limit, and that
// a tool's own errors with a "limit" member cannot grow the series without
// bound.
func TestLimitRefusalsCounted(t *testing.T) {
	s, _ := newServer(t, WithMetrics(prometheus.NewRegistry()), WithRateLimit(quota.RateLimit{PerSecond: 1e-9, Burst: 2}))
	h := s.Handler()
	serve(h, post(`{"jsonrpc":"2.0","method":"error","params":{"code":-32002,"data":{"limit":"caller_max_in_flight"}},"id":1}`))
	serve(h, post(`{"jsonrpc":"2.0","method":"error","params":{"code":-32000,"data":{"limit":"a tool's own"}},"id":2}`))
	serve(h, post(`{"jsonrpc":"2.0","method":"echo","id":3}`)) // refused by the rate limit
	m := s.metrics
	if n := testutil.CollectAndCount(m.refusals); n != 2 {
		t.Errorf("limit series = %d, want 2 (a tool error's data names no limit of toolbus)", n)
	}
	for _, c := range []struct {
		limit string
		want  float64
	}{{"caller_max_in_flight", 1}, {"rate_limit", 1}} {
		if got := testutil.ToFloat64(m.refusals.WithLabelValues(c.limit)); got != c.want {
			t.Errorf("toolbus_limit_refusals_total{limit=%q} = %v, want %v", c.limit, got, c.want)
		}
	}
	for i := range 2 * maxLimitLabels {
		m.refused(fmt.Sprintf("made_up_%d", i))
	}
	if n := testutil.CollectAndCount(m.refusals); n > maxLimitLabels+1 {
		t.Errorf("limit series = %d, want at most %d", n, maxLimitLabels+1)
	}
}

// TestRefusedCallsCarryTheTrace checks that a call answered before
// dispatch names the caller's trace in its error data and in the recent
// errors.
func TestRefusedCallsCarryTheTrace(t *testing.T) {
	s, _ := newServer(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := serve(s.Handler(), post(`{"jsonrpc":"2.0","method":"bad..name","id":9}`, "traceparent", parent))
	got := decodeOne(t, resp.Body.Bytes())
	if got.Code != schema.CodeMethodNotFound || got.Data["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("answer %+v, want -32601 with the caller's trace id", got)
	}
	if errs := s.stats.RecentErrors(); len(errs) != 1 || errs[0].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("recent errors %+v", errs)
	}
}
