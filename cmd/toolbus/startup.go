package main

import (
	"context"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/node"
)

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
		err = node.Explain(err)
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
			return node.Explain(fatal)
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
