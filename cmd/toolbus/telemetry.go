package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
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

// Trace exporters --trace-exporter accepts.
const (
	traceOff    = "off"
	traceStdout = "stdout"
	traceOTLP   = "otlp"
)

// tracingShutdownWait bounds the flush of the spans still buffered when a
// process stops: a collector that is gone must not hold the exit.
const tracingShutdownWait = 5 * time.Second

// tracingConfig is where a process sends its spans: nowhere (the default),
// to standard output as JSON lines, or to an OpenTelemetry collector over
// OTLP/HTTP. A command adds its flags with flags, and builds its provider
// with provider once the flags are parsed.
type tracingConfig struct {
	exporter string
	endpoint string
	sample   float64
}

// flags defines --trace-exporter, --trace-endpoint and --trace-sample on
// cmd; their environment variables (TOOLBUS_TRACE_EXPORTER, ...) come with
// every flag of the binary.
func (c *tracingConfig) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.exporter, "trace-exporter", traceOff, "where spans go: off, stdout (JSON lines) or otlp (OTLP over HTTP)")
	f.StringVar(&c.endpoint, "trace-endpoint", "", "base URL of the OTLP/HTTP collector, e.g. http://collector:4318 (spans go to /v1/traces under it); empty: the standard OTEL_EXPORTER_OTLP_ENDPOINT variable, else localhost:4318")
	f.Float64Var(&c.sample, "trace-sample", 1, "share of new traces recorded, 0 to 1; a call whose caller's trace is sampled is always recorded")
}

// validate checks the flags together, so that a mistake names its flag
// before anything starts.
func (c tracingConfig) validate() error {
	switch c.exporter {
	case traceOff, traceStdout, traceOTLP:
	default:
		return fmt.Errorf("--trace-exporter %q: want %s, %s or %s", c.exporter, traceOff, traceStdout, traceOTLP)
	}
	if math.IsNaN(c.sample) || c.sample < 0 || c.sample > 1 {
		return fmt.Errorf("--trace-sample %v: want a ratio from 0 to 1", c.sample)
	}
	if c.endpoint == "" {
		return nil
	}
	if c.exporter != traceOTLP {
		return fmt.Errorf("--trace-endpoint %q needs --trace-exporter %s", c.endpoint, traceOTLP)
	}
	u, err := url.Parse(c.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--trace-endpoint %q: want an http(s) base URL such as http://collector:4318", c.endpoint)
	}
	return nil
}

// tracingService is the service name of the spans of cmd:
// "toolbus-ingress" and "toolbus-worker" for those commands, "toolbus" for
// the others (dev runs both parts in one process).
func tracingService(cmd *cobra.Command) string {
	switch cmd.Name() {
	case "ingress", "worker":
		return "toolbus-" + cmd.Name()
	}
	return "toolbus"
}

// buildVersion is the version of the binary as Go recorded it: the module
// version of a `go install ...@version`, "dev" for a build from a checkout.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// provider returns the tracer provider of c for service, and the function
// that flushes and stops it, within 5 seconds of the context it is given.
// Spans of the stdout exporter go to stdout (os.Stdout when nil).
//
// With the exporter off it returns [tracelog.IDs], which records nothing
// but still gives every call a trace id (and keeps an incoming trace
// context), so that every line logged about a call, and every error
// answer, carries a trace_id to find the call by. Otherwise spans are
// batched; a new trace is recorded with the
// probability --trace-sample, and a span whose parent is known follows its
// parent's decision. The resource carries service.name and
// service.version (the [buildVersion]), which OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override, as in every OpenTelemetry SDK.
// OTLP's other settings (headers, TLS, timeout) come from the standard
// OTEL_EXPORTER_OTLP_* variables.
//
// provider sets one global, the W3C trace-context propagator (in every
// mode, so that a process that records nothing still passes its callers'
// traceparent on to the workers). It leaves the global tracer provider
// alone: the caller installs the provider with otel.SetTracerProvider, on
// which the code that takes otel.GetTracerProvider() as its default relies,
// so that tests and commands that build several providers decide which one
// is global.
func (c tracingConfig) provider(ctx context.Context, service string, stdout io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if c.exporter == traceOff {
		return tracelog.IDs(), func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch c.exporter {
	case traceStdout:
		if stdout == nil {
			stdout = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case traceOTLP:
		var opts []otlptracehttp.Option
		if c.endpoint != "" {
			// WithEndpointURL takes the URL as it is; a base URL, as
			// OTEL_EXPORTER_OTLP_ENDPOINT is, gets the traces path.
			u, jerr := url.JoinPath(c.endpoint, "v1", "traces")
			if jerr != nil {
				return nil, nil, fmt.Errorf("--trace-endpoint %q: %w", c.endpoint, jerr)
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %s exporter: %w", c.exporter, err)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(buildVersion())),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("tracing: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.sample))),
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
