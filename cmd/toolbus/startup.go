package main

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
)

// explain adds to a permanent failure what to do about it, naming the
// flags that fix it.
func explain(err error) error {
	var fix string
	switch {
	case errors.Is(err, bus.ErrCredentials):
		fix = "give the right --nats-user and --nats-password (or --nats-password-file), --nats-token (or --token-file), --nats-nkey or --nats-creds (or credentials in the --nats URL)"
	case errors.Is(err, bus.ErrTLS):
		fix = "check --nats-tls-ca, --nats-tls-cert and --nats-tls-key, and that the --nats URL names a host in the server's certificate"
	case errors.Is(err, bus.ErrServerTooOld):
		fix = "upgrade the server, or run `toolbus nats`, which contains a recent one"
	case errors.Is(err, bus.ErrNoJetStream):
		fix = "turn JetStream on in the server (nats-server -js; `toolbus nats` has it on), or run without it: --jobs=false, and --idempotency=false on an ingress"
	case errors.Is(err, bus.ErrReplicas):
		fix = "give --job-replicas no more than the NATS servers in the cluster (1 for a single server)"
	case errors.Is(err, bus.ErrJetStreamConfig):
		fix = "check --job-replicas, --job-ttl and --idempotency-ttl against the server's JetStream limits"
	default:
		return err
	}
	return fmt.Errorf("%w; %s", err, fix)
}

// startReady starts app and waits until st has nothing left to wait for,
// for the commands that use the cluster as soon as it runs; on failure app
// is stopped again.
func startReady(ctx context.Context, app *fx.App, st *bus.Startup) error {
	// Not cut short by ctx, for the reason runUntilSignal gives; ctx is
	// checked in the wait below.
	if err := app.Start(context.WithoutCancel(ctx)); err != nil {
		return cause(st, err)
	}
	st.Begin()
	var err error
	select {
	case <-st.Ready():
		return nil
	case err = <-st.Fatal():
		err = explain(err)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = app.Stop(context.WithoutCancel(ctx)) // the failure to start is what matters
	return err
}

// cause returns why the application failed to start with err: the
// permanent condition st met, if any (a start step that failed because of
// it, such as one on a connection closed after its credentials were
// refused, says less), or else err as [startError] gives it. st may be nil
// when the application could not even be built.
func cause(st *bus.Startup, err error) error {
	if st != nil {
		select {
		case fatal := <-st.Fatal():
			return explain(fatal)
		default:
		}
	}
	return startError(err)
}

// startError turns an error of building or starting the application into
// the one line a person reads: the cause, without the dependency
// injection's account of which constructor failed where.
func startError(err error) error {
	if err == nil {
		return nil
	}
	return dig.RootCause(err)
}
