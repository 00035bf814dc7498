package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/internal/listen"
	"github.com/toolbus/toolbus/jobs"
)

// observeConfig is what the ingress shows of itself: metrics, the
// dashboard and the message log.
type observeConfig struct {
	metrics        bool
	metricsCallers bool
	dashboard      bool
	msgLogMethods  []string
	msgLogMaxBytes int
	msgLogRedact   []string
}

// defaultRedact are the members the message log hides unless told
// otherwise.
var defaultRedact = []string{"password", "passwd", "secret", "token", "access_token", "refresh_token", "api_key", "apikey", "authorization", "cookie"}

func (c *observeConfig) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&c.metrics, "metrics", true, "serve Prometheus metrics at GET /metrics (open without credentials, like the probes)")
	f.BoolVar(&c.metricsCallers, "metrics-callers", false, "name each caller in the toolbus_fair_* series of /metrics, rather than count them together as _all")
	f.BoolVar(&c.dashboard, "dashboard", true, "serve the live dashboard at /ui/ (its data needs credentials when auth is on)")
	f.StringSliceVar(&c.msgLogMethods, "message-log", nil, `log the request and response bodies of these methods or patterns ("math.*", ">" for all); off when empty`)
	f.IntVar(&c.msgLogMaxBytes, "message-log-max-bytes", msglog.DefaultMaxBytes, "longest body a message log line holds; longer ones are cut and marked truncated")
	f.StringSliceVar(&c.msgLogRedact, "message-log-redact", defaultRedact, "object members whose values the message log replaces with [REDACTED], at any depth, ignoring case")
}

// messageLog is the message log configuration of c.
func (c observeConfig) messageLog() msglog.Config {
	return msglog.Config{Methods: c.msgLogMethods, MaxBytes: c.msgLogMaxBytes, Redact: c.msgLogRedact}
}

// validate checks c before anything starts, so that a mistake is reported
// as such and nothing is left running.
func (c observeConfig) validate() error {
	if err := c.messageLog().Validate(); err != nil {
		return fmt.Errorf("--message-log: %w", err)
	}
	return nil
}

// ingressOptions are the ingress options of c but the metrics, which the
// gateway serves ([node.WithMetrics]).
func (c observeConfig) ingressOptions(tp trace.TracerProvider) []ingress.Option {
	opts := []ingress.Option{ingress.WithTracerProvider(tp), ingress.WithDashboard(c.dashboard), ingress.WithMetricsCallers(c.metricsCallers)}
	// With no methods to log, the redaction list still hides failed
	// values in the dashboard's recent errors.
	opts = append(opts, ingress.WithMessageLog(c.messageLog()))
	return opts
}

// telemetryModule provides the process's metrics registry (with the Go
// runtime's and the process's own metrics) and its tracer provider, which
// it also installs as the global one and flushes on stop.
func telemetryModule(tc tracingConfig, service string) fx.Option {
	return fx.Provide(
		func() *prometheus.Registry {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			return reg
		},
		jobs.NewCounters,
		func(lc fx.Lifecycle) (trace.TracerProvider, error) {
			tp, shutdown, err := tc.provider(context.Background(), service, nil)
			if err != nil {
				return nil, err
			}
			otel.SetTracerProvider(tp)
			lc.Append(fx.StopHook(shutdown))
			return tp, nil
		},
	)
}

// workerHTTP serves a standalone worker's probes and metrics
// ([worker.ProbeHandler]) on addr until the application stops.
func workerHTTP(lc fx.Lifecycle, addr string, h http.Handler, log *slog.Logger) error {
	l, err := listen.Open(addr, `give each worker on a host its own --metrics-listen, such as 127.0.0.1:0 for any free port, or "" for none`)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("worker metrics server stopped", "err", err)
				}
			}()
			log.Info("worker metrics and probes", "url", "http://"+l.Addr().String()+"/metrics")
			return nil
		},
		// It stops last, so that /readyz says "draining" while the
		// worker drains.
		OnStop: func(ctx context.Context) error { return srv.Shutdown(ctx) },
	})
	return nil
}
