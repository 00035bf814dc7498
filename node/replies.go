package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// partReplies is the part of a gateway's [bus.Startup] that waits until
// NATS lets the ingress hear the answers of its calls.
const partReplies = "call replies"

// errReplyNotConnected is what the check of the reply grant meets while
// the connection is down; it passes.
var errReplyNotConnected = errors.New("not connected to NATS")

// checkReplyGrant checks in the background, once nc is connected, that
// its NATS user may subscribe where the gateway's aggregator hears the
// answers of its calls, under subjects' [bus.Subjects.Replies]
// (PROTOCOL.md, revision 10). An ingress without that grant would send
// every call and lose every answer, so a refusal stops the process
// ([bus.Startup.Fail]) with a sentence naming the grant to add; until the
// check passes, partReplies waits. The returned function ends the check
// if it still runs and waits for it.
func checkReplyGrant(st *bus.Startup, nc *nats.Conn, subjects bus.Subjects) (stop func()) {
	st.Wait(partReplies, "waiting for NATS")
	// The form of the aggregator's own subscription: a token, then one
	// token per call.
	probe := subjects.Replies() + "." + bus.ReplyToken() + ".*"
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		err := bus.Retry(ctx, bus.RetryConfig{Report: func(err error) { st.Wait(partReplies, err.Error()) }},
			func(ctx context.Context) error {
				if !nc.IsConnected() {
					return errReplyNotConnected
				}
				return bus.CheckSubscribe(ctx, nc, probe)
			})
		switch {
		case err == nil:
			st.Done(partReplies)
		case ctx.Err() != nil:
		default:
			st.Fail(replyGrantError(subjects, err))
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}

// replyGrantError is the sentence that stops an ingress whose NATS user
// may not subscribe under the call replies' subject.
func replyGrantError(subjects bus.Subjects, err error) error {
	grant := subjects.Replies() + ".>"
	return fmt.Errorf("%s: the workers' answers to this ingress's calls come on %s (protocol revision 10), and NATS refuses its user that subscription, "+
		"so every call would time out: add %q to the subscribe allow list of the ingress's user "+
		"(INGRESS_PERMISSIONS in deploy/nats/cluster-secure.conf, the user ingress in deploy/k8s/nats-values.yaml, or your own NATS configuration), "+
		"and %q to the publish allow list of the workers' users: %w", partReplies, grant, grant, grant, err)
}
