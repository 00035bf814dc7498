package node_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/node"
)

// cleanTracingEnv keeps the standard OpenTelemetry variables of the
// machine out of a test, and leaves no global propagator behind it. (An
// empty composite propagator, not the one found at the start: that is
// otel's initial delegate, which cannot be set again.)
func cleanTracingEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		t.Setenv(k, "")
	}
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
}

// emit starts and ends one span named name under ctx.
func emit(ctx context.Context, tp trace.TracerProvider, name string) {
	_, span := tp.Tracer("toolbus-test").Start(ctx, name)
	span.End()
}

func TestTracingOff(t *testing.T) {
	cleanTracingEnv(t)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	tp, shutdown, err := node.TracingConfig{Exporter: node.TraceOff, Sample: 1}.Provider(context.Background(), "toolbus", nil)
	if err != nil {
		t.Fatalf("provider() = %v", err)
	}
	// Nothing is recorded, but a call still gets a trace id to be found
	// by in the logs and in its error answer.
	_, span := tp.Tracer("test").Start(context.Background(), "call")
	if sc := span.SpanContext(); !sc.HasTraceID() || sc.IsSampled() || span.IsRecording() {
		t.Errorf("span of a provider with tracing off: trace id %v, sampled %v, recording %v; want an id, neither sampled nor recorded",
			sc.HasTraceID(), sc.IsSampled(), span.IsRecording())
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown() = %v, want nil", err)
	}
	// A process that records nothing still passes traceparent on.
	if got := otel.GetTextMapPropagator().Fields(); !slices.Contains(got, "traceparent") {
		t.Errorf("propagator fields = %v, want traceparent among them", got)
	}
}

func TestTracingStdout(t *testing.T) {
	cleanTracingEnv(t)
	sampledParent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1},
		SpanID:     trace.SpanID{2},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	}))
	tests := []struct {
		name   string
		sample float64
		parent context.Context
		want   bool // whether the span is written
	}{
		{"every trace", 1, context.Background(), true},
		{"no new trace", 0, context.Background(), false},
		{"sampled parent wins over the ratio", 0, sampledParent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			tp, shutdown, err := node.TracingConfig{Exporter: node.TraceStdout, Sample: tt.sample}.Provider(context.Background(), "toolbus-worker", &out)
			if err != nil {
				t.Fatalf("provider() = %v", err)
			}
			emit(tt.parent, tp, "worker.handle")
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown() = %v", err)
			}
			got := out.String()
			written := strings.Contains(got, `"Name":"worker.handle"`)
			if written != tt.want {
				t.Fatalf("stdout = %q; span written %v, want %v", got, written, tt.want)
			}
			if tt.want && (!strings.Contains(got, `"toolbus-worker"`) || !strings.Contains(got, "service.version")) {
				t.Errorf("stdout = %q, want the service name toolbus-worker and a service.version", got)
			}
		})
	}
}

// collector is an OTLP/HTTP endpoint on loopback that records the paths
// it is sent to.
type collector struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		if len(body) > 0 {
			c.paths = append(c.paths, r.URL.Path)
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths...)
}

func TestTracingOTLP(t *testing.T) {
	cleanTracingEnv(t)
	tests := []struct {
		name     string
		path     string // appended to the collector's URL as --trace-endpoint
		env      bool   // give the URL as OTEL_EXPORTER_OTLP_ENDPOINT instead
		wantPath string
	}{
		{name: "base URL", wantPath: "/v1/traces"},
		{name: "base URL with a slash", path: "/", wantPath: "/v1/traces"},
		{name: "base URL with a path", path: "/otel", wantPath: "/otel/v1/traces"},
		{name: "standard variable", env: true, wantPath: "/v1/traces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCollector(t)
			cfg := node.TracingConfig{Exporter: node.TraceOTLP, Sample: 1}
			if tt.env {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL)
			} else {
				cfg.Endpoint = c.URL + tt.path
			}
			tp, shutdown, err := cfg.Provider(context.Background(), "toolbus-ingress", nil)
			if err != nil {
				t.Fatalf("provider() = %v", err)
			}
			emit(context.Background(), tp, "ingress.batch")
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown() = %v", err)
			}
			if got := c.received(); len(got) != 1 || got[0] != tt.wantPath {
				t.Errorf("collector received spans at %v, want once at %s", got, tt.wantPath)
			}
		})
	}
}

func TestTracingConfigInvalid(t *testing.T) {
	cleanTracingEnv(t)
	tests := []struct {
		name string
		cfg  node.TracingConfig
		want []string // parts of the message: the flag, the choices
	}{
		{"unknown exporter", node.TracingConfig{Exporter: "jaeger", Sample: 1}, []string{"--trace-exporter", "off, stdout or otlp"}},
		{"ratio above one", node.TracingConfig{Exporter: node.TraceStdout, Sample: 1.5}, []string{"--trace-sample", "0 to 1"}},
		{"negative ratio", node.TracingConfig{Exporter: node.TraceOTLP, Sample: -0.1}, []string{"--trace-sample"}},
		{"endpoint without otlp", node.TracingConfig{Exporter: node.TraceOff, Sample: 1, Endpoint: "http://collector:4318"}, []string{"--trace-endpoint", "otlp"}},
		{"endpoint without scheme", node.TracingConfig{Exporter: node.TraceOTLP, Sample: 1, Endpoint: "collector:4318"}, []string{"--trace-endpoint"}},
		{"endpoint of another scheme", node.TracingConfig{Exporter: node.TraceOTLP, Sample: 1, Endpoint: "grpc://collector:4317"}, []string{"--trace-endpoint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tt.cfg.Provider(context.Background(), "toolbus", nil)
			if err == nil {
				t.Fatalf("provider(%+v) = nil, want an error", tt.cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("provider(%+v) = %q, want it to name %q", tt.cfg, err, w)
				}
			}
		})
	}
}

func TestTracingFlags(t *testing.T) {
	var c node.TracingConfig
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	node.Bind(fs, &c, node.TracingFlags)
	if err := fs.Parse([]string{"--trace-exporter", "otlp", "--trace-endpoint", "http://c:4318", "--trace-sample", "0.25"}); err != nil {
		t.Fatal(err)
	}
	if want := (node.TracingConfig{Exporter: node.TraceOTLP, Endpoint: "http://c:4318", Sample: 0.25}); c != want {
		t.Errorf("flags parsed to %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
}
