package jobs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// stuckStream answers no listing: its Info waits until its context ends,
// as a request does while NATS is unreachable. It says when it is asked,
// and why the first listing's wait ended.
type stuckStream struct {
	jetstream.Stream
	asked chan struct{}
	ended chan error
}

func (s stuckStream) Info(ctx context.Context, _ ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	select {
	case s.asked <- struct{}{}:
	default:
	}
	<-ctx.Done()
	select {
	case s.ended <- ctx.Err():
	default:
	}
	return nil, ctx.Err()
}

// TestFairLoopEndsWhileAListingWaits closes a fair loop's stop while its
// queue waits on a listing that NATS never answers, and checks that the
// loop ends then, not once the listing's own timeout has passed: a runner's
// shutdown waits for its loops.
func TestFairLoopEndsWhileAListingWaits(t *testing.T) {
	st := stuckStream{asked: make(chan struct{}, 1), ended: make(chan error, 1)}
	q, err := newFairQueue(nil, st, newNames(bus.DefaultSubjects()), "echo", jetstream.ConsumerConfig{},
		time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		fairLoop(context.Background(), stop, q, make(chan struct{}, 1), func(jetstream.Msg) {
			t.Error("the loop ran a job, want none: the stream has none")
		})
	}()
	<-st.asked
	close(stop)
	// Without stop ending it, the listing waits for its own timeout.
	if err := <-st.ended; !errors.Is(err, context.Canceled) {
		t.Errorf("the listing in progress ended with %v once stop was closed, want %v", err, context.Canceled)
	}
	<-ended
}
