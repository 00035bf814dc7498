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
	"github.com/toolbus/toolbus/internal/listen"
)

func newDevCmd() *cobra.Command {
	var (
		ic         ingressConfig
		wc         workerConfig
		tc         tracingConfig
		natsListen string
		natsToken  string
		dataDir    string
		localCalls bool
	)
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
			if err := wc.validate(); err != nil {
				return err
			}
			if err := tc.validate(); err != nil {
				return err
			}
			if err := ic.obs.validate(); err != nil {
				return err
			}
			if err := ic.sec.validate(); err != nil {
				return err
			}
			if err := ic.validateCallbacks(); err != nil {
				return err
			}
			if natsListen != "" {
				if err := listen.Check(natsListen, `choose another address with --nats-listen, or --nats-listen "" for none`); err != nil {
					return err
				}
			}
			if err := servePprof(); err != nil {
				return err
			}
			wc.prefix = ic.prefix
			if localCalls {
				wc.local = &localWorker{}
				ic.local = wc.local
			}
			var addr ingressAddr
			var emb *bus.Embedded
			var st *bus.Startup
			app := newTracedApp(tc, tracingService(cmd),
				embeddedModule(bus.EmbeddedConfig{Listen: natsListen, Token: natsToken, DataDir: dataDir}),
				workerModule(wc),
				ingressModule(ic),
				fx.Populate(&addr, &emb, &st),
			)
			return runUntilSignal(cmd.Context(), app, st, func() {
				fmt.Fprintf(cmd.OutOrStdout(), "toolbus dev ready: http://%s/rpc\n", addr)
				if ic.obs.dashboard {
					fmt.Fprintf(cmd.OutOrStdout(), "dashboard: http://%s/ui/\n", addr)
				}
				if u := emb.ClientURL(); u != "" {
					prefix := ""
					if ic.prefix != bus.DefaultPrefix {
						prefix = " --prefix " + shellQuote(ic.prefix)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "embedded NATS: %s\njoin a worker with:\n  toolbus worker --nats %s --nats-token %s%s\n%s;\n%s\n",
						u, u, shellQuote(emb.Token()), prefix, allPowerful, devTokenUse)
				}
			})
		},
	}
	ic.flags(cmd, "127.0.0.1:8080")
	ic.sec.flags(cmd, true)
	wc.flags(cmd, false)
	tc.flags(cmd)
	cmd.Flags().StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", "TCP address of the embedded NATS server for outside clients (port 0 picks a free port, empty for none)")
	cmd.Flags().StringVar(&natsToken, "nats-token", "", "an all-powerful token the clients of --nats-listen must present (default: one generated at start and printed); in-process parts need none")
	cmd.Flags().BoolVar(&localCalls, "local-calls", true, "run a call of a demo tool in this process, without the bus, while the tool has a free concurrency slot (false: every call goes over the embedded NATS, as in a split deployment)")
	cmd.Flags().StringVar(&dataDir, "data", "", "directory of the embedded JetStream store (default: a temporary directory removed at exit)")
	return cmd
}

func newIngressCmd() *cobra.Command {
	var (
		ic      ingressConfig
		tc      tracingConfig
		natsURL string
		auth    natsAuth
	)
	cmd := &cobra.Command{
		Use:   "ingress",
		Short: "Run the HTTP ingress against a NATS server or cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			natsOpts, err := auth.options()
			if err != nil {
				return fmt.Errorf("ingress: %w", err)
			}
			if err := tc.validate(); err != nil {
				return err
			}
			if err := ic.obs.validate(); err != nil {
				return err
			}
			if err := ic.sec.validate(); err != nil {
				return err
			}
			if err := ic.validateCallbacks(); err != nil {
				return err
			}
			var addr ingressAddr
			var st *bus.Startup
			app := newTracedApp(tc, tracingService(cmd), remoteModule(natsURL, natsOpts...), ingressModule(ic), fx.Populate(&addr, &st))
			return runUntilSignal(cmd.Context(), app, st, func() {
				slog.Info("ingress ready", "url", fmt.Sprintf("http://%s/rpc", addr), "nats", bus.RedactURL(natsURL))
			})
		},
	}
	ic.flags(cmd, "0.0.0.0:8080")
	ic.sec.flags(cmd, false)
	tc.flags(cmd)
	cmd.Flags().StringVar(&natsURL, "nats", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	auth.flags(cmd)
	return cmd
}

func newWorkerCmd() *cobra.Command {
	var (
		wc      workerConfig
		tc      tracingConfig
		natsURL string
		auth    natsAuth
		inbox   string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker serving toolsets against a NATS server or cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := wc.validate(); err != nil {
				return err
			}
			natsOpts, err := auth.options()
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			if err := bus.CheckInboxPrefix(inbox); err != nil {
				return fmt.Errorf("worker: --nats-inbox-prefix: %w", err)
			}
			natsOpts = append(natsOpts, bus.WithInboxPrefix(inbox))
			if err := tc.validate(); err != nil {
				return err
			}
			var st *bus.Startup
			app := newTracedApp(tc, tracingService(cmd), remoteModule(natsURL, natsOpts...), workerModule(wc), fx.Populate(&st))
			return runUntilSignal(cmd.Context(), app, st, func() {
				slog.Info("worker ready", "nats", bus.RedactURL(natsURL), "tools", wc.tools)
			})
		},
	}
	wc.flags(cmd, true)
	tc.flags(cmd)
	cmd.Flags().StringVar(&natsURL, "nats", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	cmd.Flags().StringVar(&inbox, "nats-inbox-prefix", bus.WorkerInboxPrefix, "subject prefix of the replies this worker receives; a NATS user limited to its own prefix reads no other user's replies")
	auth.flags(cmd)
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
		return stop(explain(err))
	case <-sig.Done():
		return stop(nil)
	}
	select {
	case err := <-st.Fatal():
		return stop(explain(err))
	case <-sig.Done():
		return stop(nil)
	}
}

// discard is a logger for the commands that print their own output.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
