package toolbustest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// TestTraceCrossesTheBus checks that one trace runs from the agent's
// traceparent through the ingress's batch and call spans, over NATS, to the
// worker's span around the handler, and that the error answer names it.
func TestTraceCrossesTheBus(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c := toolbustest.Start(t,
		toolbustest.WithTracerProvider(tp),
		toolbustest.WithWorkerTracerProvider(tp))

	const agentTrace = "0af7651916cd43dd8448eb211c80319c"
	got := c.Batch(t, `[{"jsonrpc":"2.0","method":"echo","params":["hi"],"id":1},
		{"jsonrpc":"2.0","method":"fail","params":{"message":"nope"},"id":2}]`,
		"traceparent", "00-"+agentTrace+"-b7ad6b7169203331-01")
	if len(got) != 2 || got[1].Error == nil {
		t.Fatalf("answers %+v", got)
	}
	var data map[string]any
	if err := json.Unmarshal(got[1].Error.Data, &data); err != nil || data["trace_id"] != agentTrace {
		t.Fatalf("error data %s: want trace_id %s", got[1].Error.Data, agentTrace)
	}

	// The worker's span ends before its reply is sent; the ingress's
	// call span when the answer arrives. Wait for both to be recorded.
	var calls, workers map[string]sdktrace.ReadOnlySpan
	toolbustest.Eventually(t, func() bool {
		calls, workers = map[string]sdktrace.ReadOnlySpan{}, map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range rec.Ended() {
			if m, ok := strings.CutPrefix(sp.Name(), "toolbus.call "); ok {
				calls[m] = sp
			}
			if m, ok := strings.CutPrefix(sp.Name(), "toolbus.worker "); ok {
				workers[m] = sp
			}
		}
		return len(calls) == 2 && len(workers) == 2
	}, "the call and worker spans of echo and fail end")
	for _, m := range []string{"echo", "fail"} {
		call, w := calls[m], workers[m]
		if call == nil || w == nil {
			t.Fatalf("%s: call span %v, worker span %v", m, call != nil, w != nil)
		}
		if w.SpanContext().TraceID().String() != agentTrace || call.SpanContext().TraceID().String() != agentTrace {
			t.Errorf("%s: trace ids %s and %s, want the agent's %s", m, call.SpanContext().TraceID(), w.SpanContext().TraceID(), agentTrace)
		}
		if w.Parent().SpanID() != call.SpanContext().SpanID() || !w.Parent().IsRemote() {
			t.Errorf("%s: the worker span's parent is %s, want the ingress's call span %s across the bus", m, w.Parent().SpanID(), call.SpanContext().SpanID())
		}
	}
	if workers["fail"].Status().Code.String() != "Error" {
		t.Errorf("the failed call's worker span has status %v", workers["fail"].Status())
	}
}

// TestMetricsAcrossTheCluster checks that the ingress's and the worker's
// metrics, and the workers per method, move as calls flow, on one registry
// as the one-process mode has it.
func TestMetricsAcrossTheCluster(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := toolbustest.Start(t, toolbustest.WithDiscovery(),
		toolbustest.WithMetrics(reg),
		toolbustest.WithWorkerMetrics(reg))
	toolbustest.Eventually(t, func() bool { return c.Registry.Known("echo") }, "the registry knows echo")
	for range 3 {
		c.Call(t, "echo", `[1]`)
	}
	c.Call(t, "fail", `{"message":"x"}`)

	resp, err := http.Get(c.BaseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, want := range []string{
		`toolbus_ingress_calls_total{code="ok",method="echo"} 3`,
		`toolbus_ingress_calls_total{code="-32000",method="fail"} 1`,
		`toolbus_worker_calls_total{code="ok",method="echo"} 3`,
		`toolbus_worker_call_duration_seconds_count{method="echo"} 3`,
		`toolbus_workers{method="echo"} 1`,
		`toolbus_ingress_in_flight{method="echo"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "toolbus_ingress_call_duration_seconds"); err != nil || n != 2 {
		t.Errorf("ingress duration series: %d (%v), want echo and fail", n, err)
	}
}

// TestJobJoinsSubmittersTrace checks that a job's run, on whichever worker
// and however much later, is traced under the call that submitted it.
func TestJobJoinsSubmittersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	c := toolbustest.Start(t, toolbustest.WithJobs(),
		toolbustest.WithTracerProvider(tp),
		toolbustest.WithWorkerTracerProvider(tp))

	const agentTrace = "5b8aa5a2d2c872e8321cf37308d69df2"
	r := c.Call(t, "rpc.jobs.submit", `{"method":"echo","params":["later"]}`,
		"traceparent", "00-"+agentTrace+"-051581bf3cb55c13-01")
	if r.Error != nil {
		t.Fatalf("submit: %v", r.Error)
	}
	toolbustest.Eventually(t, func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == "toolbus.worker echo" && sp.SpanContext().TraceID().String() == agentTrace {
				return true
			}
		}
		return false
	}, "the job's worker span ends in the agent's trace")
}

// TestDashboardCountsPatternWorkers checks that a method served by a
// pattern handler shows the pattern's workers, not none.
func TestDashboardCountsPatternWorkers(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.Handle("calc.*", worker.HandlerFunc(func(_ context.Context, r *worker.Request) (any, error) {
			return r.Method, nil
		}))
	}))
	toolbustest.Eventually(t, func() bool { return c.Registry.Known("calc.add") }, "the registry knows calc.add")
	if r := c.Call(t, "calc.add", `[]`); r.Error != nil {
		t.Fatalf("calc.add: %v", r.Error)
	}
	st := c.Ingress.Dashboard(context.Background())
	for _, m := range st.Methods {
		if m.Method == "calc.add" {
			if m.Workers == nil || *m.Workers != 1 || m.Total != 1 {
				t.Errorf("calc.add row %+v, want one call and the pattern's one worker", m)
			}
			return
		}
	}
	t.Errorf("no calc.add row in %+v", st.Methods)
}
