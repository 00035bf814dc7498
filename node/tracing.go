package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/tracelog"
)

// Trace exporters [TracingConfig.Exporter] accepts.
const (
	TraceOff    = "off"
	TraceStdout = "stdout"
	TraceOTLP   = "otlp"
)

// tracingShutdownWait bounds the flush of the spans still buffered when a
// process stops: a collector that is gone must not hold the exit.
const tracingShutdownWait = 5 * time.Second

// TracingConfig is where a process sends its spans: nowhere (the
// default), to standard output as JSON lines, or to an OpenTelemetry
// collector over OTLP/HTTP. [TracingConfig.Provider] builds its tracer
// provider.
type TracingConfig struct {
	// Exporter (--trace-exporter) is [TraceOff], [TraceStdout] or
	// [TraceOTLP]. Default [TraceOff].
	Exporter string
	// Endpoint (--trace-endpoint) is the base URL of the OTLP/HTTP
	// collector, for [TraceOTLP]; empty for the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT variable, else localhost:4318. Default
	// empty.
	Endpoint string
	// Sample (--trace-sample) is the share of new traces recorded, 0 to 1.
	// Default 1.
	Sample float64
}

// DefaultTracingConfig returns the tracing of a process without flags:
// off, every trace recorded once turned on.
func DefaultTracingConfig() TracingConfig {
	return TracingConfig{Exporter: TraceOff, Sample: 1}
}

// Validate checks the settings together, so that a mistake names its flag
// before anything starts.
func (c TracingConfig) Validate() error {
	switch c.Exporter {
	case TraceOff, TraceStdout, TraceOTLP:
	default:
		return fmt.Errorf("--trace-exporter %q is no exporter: want %s, %s or %s", c.Exporter, TraceOff, TraceStdout, TraceOTLP)
	}
	if math.IsNaN(c.Sample) || c.Sample < 0 || c.Sample > 1 {
		return fmt.Errorf("--trace-sample %v is no ratio: want a ratio from 0 to 1", c.Sample)
	}
	if c.Endpoint == "" {
		return nil
	}
	if c.Exporter != TraceOTLP {
		return fmt.Errorf("--trace-endpoint %q is only for OTLP: give --trace-exporter %s with it, or drop it", c.Endpoint, TraceOTLP)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--trace-endpoint %q is no collector address: want an http(s) base URL such as http://collector:4318", c.Endpoint)
	}
	return nil
}

// Provider returns the tracer provider of c for service, and the function
// that flushes and stops it, within 5 seconds of the context it is given.
// Spans of the stdout exporter go to stdout (os.Stdout when nil).
//
// With the exporter off it returns [tracelog.IDs], which records nothing
// but still gives every call a trace id (and keeps an incoming trace
// context), so that every line logged about a call, and every error
// answer, carries a trace_id to find the call by. Otherwise spans are
// batched; a new trace is recorded with the probability Sample, and a span
// whose parent is known follows its parent's decision. The resource
// carries service.name and service.version (the [BuildVersion]), which
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override, as in every
// OpenTelemetry SDK. OTLP's other settings (headers, TLS, timeout) come
// from the standard OTEL_EXPORTER_OTLP_* variables.
//
// Provider sets one global, the W3C trace-context propagator (in every
// mode, so that a process that records nothing still passes its callers'
// traceparent on to the workers). It leaves the global tracer provider
// alone: the caller installs the provider with otel.SetTracerProvider, on
// which the code that takes otel.GetTracerProvider() as its default
// relies, so that tests and commands that build several providers decide
// which one is global.
func (c TracingConfig) Provider(ctx context.Context, service string, stdout io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if c.Exporter == TraceOff {
		return tracelog.IDs(), func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch c.Exporter {
	case TraceStdout:
		if stdout == nil {
			stdout = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case TraceOTLP:
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			// WithEndpointURL takes the URL as it is; a base URL, as
			// OTEL_EXPORTER_OTLP_ENDPOINT is, gets the traces path.
			u, jerr := url.JoinPath(c.Endpoint, "v1", "traces")
			if jerr != nil {
				return nil, nil, fmt.Errorf("--trace-endpoint %q: %w", c.Endpoint, jerr)
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %s exporter: %w", c.Exporter, err)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(BuildVersion())),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("tracing: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.Sample))),
		sdktrace.WithResource(res),
	)
	shutdown := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, tracingShutdownWait)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush spans: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}
