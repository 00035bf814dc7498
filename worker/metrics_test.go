package worker_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// series returns the metric of family name in reg whose labels are exactly
// labels, or nil.
func series(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m
			}
		}
	}
	return nil
}

// value returns the value of a counter or gauge series, 0 when it is absent.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(t, reg, name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// calls is the label set of toolbus_worker_calls_total.
func calls(method, code string) map[string]string {
	return map[string]string{"method": method, "code": code}
}

func refused(method, reason string) map[string]string {
	return map[string]string{"method": method, "reason": reason}
}

func only(method string) map[string]string { return map[string]string{"method": method} }

func TestMetricsCountCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	handlers := map[string]worker.HandlerFunc{
		"m.ok": func(context.Context, *worker.Request) (any, error) { return 1, nil },
		"m.code": func(context.Context, *worker.Request) (any, error) {
			return nil, &schema.Error{Code: 2001, Message: "no"}
		},
		"m.tool": func(context.Context, *worker.Request) (any, error) { return nil, errors.New("disk full") },
		"pat.*":  func(context.Context, *worker.Request) (any, error) { return "p", nil },
	}
	for pattern, h := range handlers {
		if err := c.rt.Handle(pattern, h); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	started := make(chan struct{})
	if err := c.rt.HandleFunc("m.slow", func(context.Context, *worker.Request) (any, error) {
		close(started)
		<-release
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	// Series exist at zero before the first call, so that rates start
	// from it.
	if m := series(t, reg, "toolbus_worker_calls_total", calls("m.ok", "ok")); m == nil || m.Counter.GetValue() != 0 {
		t.Errorf("calls_total{m.ok,ok} before any call = %v, want 0", m)
	}
	if m := series(t, reg, "toolbus_worker_refused_total", refused("m.ok", "busy")); m == nil {
		t.Errorf("refused_total{m.ok,busy} before any call is absent, want 0")
	}

	c.result(t, "m.ok", "")
	c.result(t, "m.ok", "")
	c.rpcError(t, "m.code", "", time.Time{})
	c.rpcError(t, "m.tool", "", time.Time{})
	c.result(t, "pat.a", "")
	c.result(t, "pat.b", "")

	done := make(chan struct{})
	go func() {
		defer close(done)
		c.result(t, "m.slow", "")
	}()
	<-started
	if got := value(t, reg, "toolbus_worker_in_flight", only("m.slow")); got != 1 {
		t.Errorf("in_flight{m.slow} while running = %v, want 1", got)
	}
	close(release)
	<-done

	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"results", "toolbus_worker_calls_total", calls("m.ok", "ok"), 2},
		{"business code", "toolbus_worker_calls_total", calls("m.code", "2001"), 1},
		{"tool error", "toolbus_worker_calls_total", calls("m.tool", "-32000"), 1},
		{"pattern, not the method called", "toolbus_worker_calls_total", calls("pat.*", "ok"), 2},
		{"no series for a called method", "toolbus_worker_calls_total", calls("pat.a", "ok"), 0},
		{"in flight back to zero", "toolbus_worker_in_flight", only("m.slow"), 0},
		{"slow call counted", "toolbus_worker_calls_total", calls("m.slow", "ok"), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := value(t, reg, tc.metric, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
			}
		})
	}
	for method, want := range map[string]uint64{"m.ok": 2, "pat.*": 2, "m.slow": 1} {
		m := series(t, reg, "toolbus_worker_call_duration_seconds", only(method))
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("call_duration_seconds{%s} count = %d, want %d", method, got, want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v, want no problems", problems, err)
	}
}

func TestMetricsCountRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	if err := c.rt.HandleFunc("one", func(context.Context, *worker.Request) (any, error) {
		started <- struct{}{}
		<-release
		return 1, nil
	}, worker.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	// A late call is dropped without an answer. The subscription hands
	// calls over in order, so once the next call is answered the late one
	// has been seen.
	late := callMsg(t, "one", "", time.Now().Add(-time.Second))
	if err := c.caller.PublishMsg(late); err != nil {
		t.Fatal(err)
	}
	first := c.watch(t, callMsg(t, "one", "", time.Time{}))
	<-started
	if got := next(t, first).Header.Get(schema.HeaderProgress); got != schema.ProgressAck {
		t.Fatalf("first call %s = %q, want %q", schema.HeaderProgress, got, schema.ProgressAck)
	}
	if got := value(t, reg, "toolbus_worker_refused_total", refused("one", "late")); got != 1 {
		t.Errorf("refused_total{one,late} = %v, want 1", got)
	}

	busy := c.watch(t, callMsg(t, "one", "", time.Time{}))
	if got := next(t, busy).Header.Get(schema.HeaderProgress); got != schema.ProgressBusy {
		t.Fatalf("second call %s = %q, want %q", schema.HeaderProgress, got, schema.ProgressBusy)
	}
	if got := value(t, reg, "toolbus_worker_refused_total", refused("one", "busy")); got != 1 {
		t.Errorf("refused_total{one,busy} = %v, want 1", got)
	}

	// A caller without heartbeats waits for the slot until its deadline.
	if e := c.rpcError(t, "one", "", time.Now().Add(100*time.Millisecond)); !errors.Is(e, schema.ErrTimeout) {
		t.Errorf("call waiting for a slot = %d %q, want -32001", e.Code, e.Message)
	}
	if got := value(t, reg, "toolbus_worker_refused_total", refused("one", "timeout")); got != 1 {
		t.Errorf("refused_total{one,timeout} = %v, want 1", got)
	}
	close(release)
	reply(t, first)
	if got := value(t, reg, "toolbus_worker_calls_total", calls("one", "ok")); got != 1 {
		t.Errorf("calls_total{one,ok} = %v, want 1: refused calls are not calls", got)
	}
}

// TestMetricsShareRegistry runs two runtimes in one process on one
// registry, as the one-process mode does.
func TestMetricsShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	b := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	echo := func(context.Context, *worker.Request) (any, error) { return "e", nil }
	for _, c := range []*cluster{a, b} {
		if err := c.rt.HandleFunc("shared.echo", echo); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.rt.HandleFunc("b.only", echo); err != nil {
		t.Fatal(err)
	}
	a.start(t)
	b.start(t)
	a.result(t, "shared.echo", "")
	b.result(t, "shared.echo", "")
	b.result(t, "shared.echo", "")
	b.result(t, "b.only", "")
	if got := value(t, reg, "toolbus_worker_calls_total", calls("shared.echo", "ok")); got != 3 {
		t.Errorf("calls_total{shared.echo,ok} = %v, want 3 (both runtimes)", got)
	}
	if got := value(t, reg, "toolbus_worker_calls_total", calls("b.only", "ok")); got != 1 {
		t.Errorf("calls_total{b.only,ok} = %v, want 1", got)
	}
}

func TestMetricsRefuseConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolbus_worker_calls_total", Help: "not ours"}))
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
	if _, err := worker.New(nc, worker.WithMetrics(reg)); err == nil {
		t.Error("New with a registry holding another toolbus_worker_calls_total succeeded, want an error")
	}
	if _, err := worker.New(nc, worker.WithMetrics(nil)); err == nil {
		t.Error("New(WithMetrics(nil)) succeeded, want an error")
	}
}
