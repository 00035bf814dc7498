package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func TestCancelMessageReachesTheHandler(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	started := make(chan struct{}, 2)
	seen := make(chan error, 2)
	if err := c.rt.HandleFunc("hang", func(ctx context.Context, _ *worker.Request) (any, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			seen <- ctx.Err()
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
			seen <- nil
			return "not canceled", nil
		}
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	for _, tc := range []struct {
		name     string
		cancelID string // what the cancel message names
		want     error
	}{
		{"the call's id", "call-A", context.Canceled},
		{"another call's id", "call-other", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := callMsg(t, "hang", "", time.Now().Add(time.Minute))
			msg.Header.Set(schema.HeaderCallID, "call-A")
			replied := make(chan *schema.ReplyEnvelope, 1)
			go func() {
				r, _ := c.send(msg)
				replied <- r
			}()
			<-started
			if err := c.caller.Publish("toolbus.cancel", []byte(tc.cancelID)); err != nil {
				t.Fatal(err)
			}
			c.caller.Flush()
			if tc.want == nil {
				// Nothing must happen to the call; give the message time
				// to arrive, then cancel it for real to end the test.
				select {
				case err := <-seen:
					t.Fatalf("handler ended with %v after a cancel of another call", err)
				case <-time.After(300 * time.Millisecond):
				}
				c.caller.Publish("toolbus.cancel", []byte("call-A"))
				<-seen
				<-replied
				return
			}
			select {
			case err := <-seen:
				if !errors.Is(err, tc.want) {
					t.Fatalf("handler context ended with %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the cancel message never reached the handler")
			}
			if r := <-replied; r == nil || !errors.Is(r.Err(), schema.ErrCanceled) {
				t.Fatalf("reply = %+v, want canceled", r)
			}
		})
	}
}

// TestCancelStopsEveryAttempt: a call published again (a retry-safe call
// whose first worker was slow) may reach the same worker twice under one
// call id; the cancel message stops both attempts.
func TestCancelStopsEveryAttempt(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	started := make(chan struct{}, 2)
	seen := make(chan error, 2)
	if err := c.rt.HandleFunc("hang", func(ctx context.Context, _ *worker.Request) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		seen <- ctx.Err()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	replied := make(chan *schema.ReplyEnvelope, 2)
	for range 2 {
		msg := callMsg(t, "hang", "", time.Now().Add(time.Minute))
		msg.Header.Set(schema.HeaderCallID, "call-twice")
		go func() {
			r, _ := c.send(msg)
			replied <- r
		}()
	}
	<-started
	<-started
	if err := c.caller.Publish("toolbus.cancel", []byte("call-twice")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-seen; !errors.Is(err, context.Canceled) {
			t.Fatalf("an attempt's context ended with %v, want canceled", err)
		}
		if r := <-replied; r == nil || !errors.Is(r.Err(), schema.ErrCanceled) {
			t.Fatalf("reply = %+v, want canceled", r)
		}
	}
}

// TestCancelBeforeItsCall: the cancel of a call comes on another
// subscription than the call, so it may be handled first; the call, when it
// comes, is canceled at once.
func TestCancelBeforeItsCall(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	seen := make(chan error, 1)
	if err := c.rt.HandleFunc("hang", func(ctx context.Context, _ *worker.Request) (any, error) {
		<-ctx.Done()
		seen <- context.Cause(ctx)
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	if err := c.caller.Publish("toolbus.cancel", []byte("call-early")); err != nil {
		t.Fatal(err)
	}
	// The cancel is handled before the call is sent: a request on the same
	// connection is answered after the server delivered what came before.
	if err := c.caller.Flush(); err != nil {
		t.Fatal(err)
	}
	msg := callMsg(t, "hang", "", time.Now().Add(time.Minute))
	msg.Header.Set(schema.HeaderCallID, "call-early")
	r, err := c.send(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-seen; err == nil {
		t.Fatal("the handler's context ended without a cause")
	}
	if !errors.Is(r.Err(), schema.ErrCanceled) {
		t.Fatalf("reply = %+v, want canceled", r)
	}
}
