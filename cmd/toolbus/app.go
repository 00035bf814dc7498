package main

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/listen"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/worker"
)

// connector opens a NATS connection with a client name; the embedded mode
// connects in-process, the others over the network.
type connector func(name string) (*nats.Conn, error)

// embeddedModule runs an embedded NATS server and connects to it in-process.
func embeddedModule(cfg bus.EmbeddedConfig) fx.Option {
	return embedded(cfg, func(e *bus.Embedded, name string) (*nats.Conn, error) {
		return e.Connect(bus.WithName(name))
	})
}

// embeddedTCPModule runs an embedded NATS server on a free loopback port and
// connects to it over TCP with its token, as separate processes would; the
// benchmark uses it to weigh the in-process connection.
func embeddedTCPModule() fx.Option {
	return embedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"}, func(e *bus.Embedded, name string) (*nats.Conn, error) {
		return bus.Connect(e.ClientURL(), bus.WithName(name), bus.WithToken(e.Token()))
	})
}

func embedded(cfg bus.EmbeddedConfig, connect func(e *bus.Embedded, name string) (*nats.Conn, error)) fx.Option {
	return fx.Options(
		fx.Provide(func(lc fx.Lifecycle) (*bus.Embedded, error) {
			e, err := bus.StartEmbedded(cfg)
			if err != nil {
				return nil, err
			}
			lc.Append(fx.StopHook(e.Shutdown))
			return e, nil
		}),
		fx.Provide(func(e *bus.Embedded) connector {
			return func(name string) (*nats.Conn, error) { return connect(e, name) }
		}),
	)
}

// remoteModule connects to NATS servers over the network, with opts (the
// authentication and TLS of a [bus.RemoteConfig]) after the client name. A
// connection is returned at once even when no server answers yet: it keeps
// trying in the background, and the process's [bus.Startup] says what it waits
// for until it is connected, or stops the process when the server refuses
// it for good.
func remoteModule(url string, opts ...bus.Option) fx.Option {
	return fx.Provide(func(st *bus.Startup) connector {
		return func(name string) (*nats.Conn, error) {
			o := append([]bus.Option{bus.WithName(name)}, opts...)
			o = append(o, bus.WithRetryOnFailedConnect(), bus.WithStatusFunc(st.WatchConn(name, url)))
			return bus.Connect(url, o...)
		}
	})
}

// ingressAddr is the address the ingress listens on, known once its
// listener is open.
type ingressAddr struct{ net.Addr }

// devModules are the parts of one `toolbus dev` process, as dev, demo and
// the bench's in-process cluster assemble it: NATS (nats), then the
// worker, then the gateway, which fx starts in that order and stops in
// the reverse; local, when not nil, lets the gateway run the worker's
// calls in the process.
func devModules(nats fx.Option, gc node.GatewayConfig, wc node.WorkerConfig, local *worker.Deferred) fx.Option {
	return fx.Options(nats, workerModule(wc, local), ingressModule(gc))
}

// ingressModule runs the gateway cfg describes, on a connection of its
// own, and hooks its start and stop to the application's.
func ingressModule(cfg node.GatewayConfig) fx.Option {
	return fx.Options(
		fx.Provide(func(lc fx.Lifecycle, connect connector, tel node.Telemetry, st *bus.Startup) (*node.Gateway, ingressAddr, error) {
			if err := cfg.Validate(); err != nil {
				return nil, ingressAddr{}, err
			}
			nc, err := connect("toolbus-ingress")
			if err != nil {
				return nil, ingressAddr{}, err
			}
			// Appended first, the connection drains last.
			lc.Append(fx.StopHook(func() { bus.DrainLogged(nc, tel.Log) }))
			g, err := node.NewGatewayFrom(nc, st, cfg, tel)
			if err != nil {
				return nil, ingressAddr{}, err
			}
			l, err := listen.Open(cfg.Listen, "choose another address with --listen")
			if err != nil {
				return nil, ingressAddr{}, err
			}
			lc.Append(fx.Hook{
				OnStart: func(context.Context) error { return g.Start(l) },
				OnStop: func(ctx context.Context) error {
					ctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
					defer cancel()
					return g.Shutdown(ctx)
				},
			})
			return g, ingressAddr{l.Addr()}, nil
		}),
		fx.Invoke(func(*node.Gateway) {}),
	)
}

// workerModule runs the worker cfg describes, on a connection of its own,
// and hooks its start and stop to the application's; local, when not nil,
// is given its runtime.
func workerModule(cfg node.WorkerConfig, local *worker.Deferred) fx.Option {
	return fx.Invoke(func(lc fx.Lifecycle, connect connector, tel node.Telemetry, st *bus.Startup) error {
		if err := cfg.Validate(); err != nil {
			return err
		}
		nc, err := connect("toolbus-worker")
		if err != nil {
			return err
		}
		// Appended first, the connection closes last, and also when the
		// application stops before the worker has started (a start that
		// was canceled or failed in a later hook).
		lc.Append(fx.StopHook(func() { bus.DrainLogged(nc, tel.Log) }))
		w, err := node.NewWorkerFrom(nc, st, cfg, tel)
		if err != nil {
			nc.Close()
			return err
		}
		lc.Append(fx.Hook{
			OnStart: w.Start,
			OnStop: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, cfg.ShutdownTimeout)
				defer cancel()
				return w.Shutdown(ctx)
			},
		})
		if local != nil {
			local.Set(w.Runtime)
		}
		tel.Log.Info("worker serving", "methods", w.Runtime.Methods())
		return nil
	})
}

// newApp builds an fx application from modules, logging through the
// default logger and quiet about fx's own events, with tracing off.
func newApp(modules ...fx.Option) *fx.App {
	return newTracedApp(node.DefaultTracingConfig(), "toolbus", modules...)
}

// newTracedApp is [newApp] with the tracing of tc, under the service name
// service.
func newTracedApp(tc node.TracingConfig, service string, modules ...fx.Option) *fx.App {
	return fx.New(
		fx.NopLogger,
		fx.Provide(func() *slog.Logger { return slog.Default() }),
		fx.Provide(func(lc fx.Lifecycle, log *slog.Logger) *bus.Startup {
			st := bus.NewStartup(log)
			lc.Append(fx.StopHook(st.Stop))
			return st
		}),
		telemetryModule(tc, service),
		fx.Provide(func(log *slog.Logger, reg *prometheus.Registry, tp trace.TracerProvider, counters *jobs.Counters) node.Telemetry {
			return node.Telemetry{Log: log, Metrics: reg, Tracer: tp, Counters: counters}
		}),
		fx.StartTimeout(30*time.Second),
		fx.StopTimeout(2*time.Minute),
		fx.Options(modules...),
	)
}

// telemetryModule provides the process's metrics registry (with the Go
// runtime's and the process's own metrics), its job counters and its
// tracer provider, which it also installs as the global one and flushes
// on stop.
func telemetryModule(tc node.TracingConfig, service string) fx.Option {
	return fx.Provide(
		func() *prometheus.Registry {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			return reg
		},
		jobs.NewCounters,
		func(lc fx.Lifecycle) (trace.TracerProvider, error) {
			tp, shutdown, err := tc.Provider(context.Background(), service, nil)
			if err != nil {
				return nil, err
			}
			otel.SetTracerProvider(tp)
			lc.Append(fx.StopHook(shutdown))
			return tp, nil
		},
	)
}
