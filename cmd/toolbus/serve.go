package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/worker"
)

func newDevCmd() *cobra.Command {
	dc := node.DefaultDevConfig()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process: embedded NATS, ingress and demo workers",
		Long: `dev runs an embedded NATS server with JetStream, the HTTP ingress and a worker
serving the demo tools in one process, and prints the URL when it is ready.
The ingress and the worker reach NATS in-process; --nats-listen also opens a
TCP port so that other workers can join. Clients of that port must present a
token, an all-powerful one: --nats-token, or else one generated at start. A
client with it may publish calls as any caller, answer any call and read
every job record, so it is for your own workers on this machine; for a
shared bus run the parts separately (toolbus nats). The ready lines print the
command that joins a worker (toolbus worker --nats URL --nats-token TOKEN).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The worker shares the ingress's prefix, and the process's
			// tracing is the ingress's.
			dc.Worker.Prefix = dc.Gateway.Prefix
			if err := dc.Validate(); err != nil {
				return err
			}
			if err := node.ServeProfiler(dc.Pprof, slog.Default()); err != nil {
				return err
			}
			gc, wc := dc.Gateway, dc.Worker
			var local *worker.Deferred
			if dc.LocalCalls {
				local = &worker.Deferred{}
				gc.Local = local
			}
			var addr ingressAddr
			var emb *bus.Embedded
			var st *bus.Startup
			app := newTracedApp(gc.Tracing, tracingService(cmd),
				devModules(embeddedModule(dc.NATS), gc, wc, local),
				fx.Populate(&addr, &emb, &st),
			)
			return runUntilSignal(cmd.Context(), app, st, func() {
				fmt.Fprintf(cmd.OutOrStdout(), "toolbus dev ready: http://%s/rpc\n", addr)
				if gc.Dashboard {
					fmt.Fprintf(cmd.OutOrStdout(), "dashboard: http://%s/ui/\n", addr)
				}
				if u := emb.ClientURL(); u != "" {
					prefix := ""
					if gc.Prefix != bus.DefaultPrefix {
						prefix = " --prefix " + shellQuote(gc.Prefix)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "embedded NATS: %s\njoin a worker with:\n  toolbus worker --nats %s --nats-token %s%s\n%s;\n%s\n",
						u, u, shellQuote(emb.Token()), prefix, allPowerful, devTokenUse)
				}
			})
		},
	}
	f := cmd.Flags()
	node.Bind(f, &dc.Gateway, node.GatewayFlags)
	node.Bind(f, &dc.Worker, node.WorkerFlags)
	node.Bind(f, &dc.Gateway.Tracing, node.TracingFlags)
	node.Bind(f, &dc, node.DevFlags)
	return cmd
}

func newIngressCmd() *cobra.Command {
	gc, remote := node.DefaultGatewayConfig(), bus.DefaultRemoteConfig()
	cmd := &cobra.Command{
		Use:   "ingress",
		Short: "Run the HTTP ingress against a NATS server or cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			natsOpts, err := remote.Options()
			if err != nil {
				return fmt.Errorf("ingress: %w", err)
			}
			if err := gc.Validate(); err != nil {
				return err
			}
			var addr ingressAddr
			var st *bus.Startup
			app := newTracedApp(gc.Tracing, tracingService(cmd), remoteModule(remote.URL, natsOpts...), ingressModule(gc), fx.Populate(&addr, &st))
			return runUntilSignal(cmd.Context(), app, st, func() {
				slog.Info("ingress ready", "url", fmt.Sprintf("http://%s/rpc", addr), "nats", bus.RedactURL(remote.URL))
			})
		},
	}
	node.Bind(cmd.Flags(), &gc, node.GatewayFlags)
	node.Bind(cmd.Flags(), &gc.Tracing, node.TracingFlags)
	node.Bind(cmd.Flags(), &remote, node.RemoteFlags)
	return cmd
}

func newWorkerCmd() *cobra.Command {
	wc, remote := node.DefaultWorkerConfig(), bus.DefaultRemoteConfig()
	remote.InboxPrefix = bus.WorkerInboxPrefix
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker serving toolsets against a NATS server or cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wc.Validate(); err != nil {
				return err
			}
			natsOpts, err := remote.Options()
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			var st *bus.Startup
			app := newTracedApp(wc.Tracing, tracingService(cmd), remoteModule(remote.URL, natsOpts...), workerModule(wc, nil), fx.Populate(&st))
			return runUntilSignal(cmd.Context(), app, st, func() {
				slog.Info("worker ready", "nats", bus.RedactURL(remote.URL), "tools", wc.Tools)
			})
		},
	}
	f := cmd.Flags()
	node.Bind(f, &wc, node.StandaloneWorkerFlags)
	node.Bind(f, &wc, node.WorkerFlags)
	node.Bind(f, &wc.Tracing, node.TracingFlags)
	// A worker runs jobs as calls, sent by the ingresses' runners; it
	// still accepts the job flags of the workers that ran jobs
	// themselves.
	f.Bool("jobs", true, "")
	f.Duration("job-lease", jobs.DefaultLease, "")
	f.Int("job-concurrency", jobs.DefaultRunConcurrency, "")
	for _, name := range []string{"jobs", "job-lease", "job-concurrency"} {
		_ = f.MarkDeprecated(name, "a worker runs jobs as calls sent by the ingress, which has --job-lease and --job-concurrency; drop it from the worker's command line")
	}
	node.Bind(f, &remote, node.RemoteFlags)
	node.Bind(f, &remote, node.WorkerRemoteFlags)
	return cmd
}

// runUntilSignal starts app, calls ready once st has nothing left to wait
// for, and runs until SIGINT or SIGTERM (or ctx), or until st meets a
// condition that will not pass; then it stops app gracefully. It returns
// that condition, or why app could not start, as one line a person reads.
func runUntilSignal(ctx context.Context, app *fx.App, st *bus.Startup, ready func()) error {
	if ctx == nil {
		ctx = context.Background()
	}
	sig, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	// The start is never cut short by a signal: fx would return at once
	// while the hooks it had begun went on starting in the background,
	// with nothing left to stop them. Its hooks do not wait for NATS, so
	// it is quick; a signal that came meanwhile stops the app below.
	if err := app.Start(context.WithoutCancel(sig)); err != nil {
		return cause(st, err)
	}
	stop := func(cause error) error {
		if cause == nil {
			slog.Info("shutting down: draining calls in flight")
		}
		err := app.Stop(context.WithoutCancel(ctx))
		if cause != nil {
			return cause
		}
		return startError(err)
	}
	if sig.Err() != nil {
		return stop(nil)
	}
	st.Begin()
	if err := st.Err(); err != nil {
		slog.Info("started, not ready yet", "reason", err.Error())
	}
	select {
	case <-st.Ready():
		ready()
	case err := <-st.Fatal():
		return stop(node.Explain(err))
	case <-sig.Done():
		return stop(nil)
	}
	select {
	case err := <-st.Fatal():
		return stop(node.Explain(err))
	case <-sig.Done():
		return stop(nil)
	}
}

// discard is a logger for the commands that print their own output.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
