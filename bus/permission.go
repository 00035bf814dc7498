package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// checkSubscribeWait bounds the wait of [CheckSubscribe] when its
// context has no deadline.
const checkSubscribeWait = 10 * time.Second

// CheckSubscribe asks the NATS server whether it lets nc subscribe to
// subject: it subscribes, waits for the server to answer a ping within
// ctx (within 10 seconds when ctx has no deadline), and unsubscribes. A server refuses a subscription it does not
// permit with an error that it sends before the answer to the ping, so a
// refusal is known once the ping is answered; nats.go reports it only
// asynchronously, where the process's error handler logs it without
// saying what it costs. CheckSubscribe lets the part that needs the
// subscription stop at start and name the grant instead.
//
// It returns nil when the server accepts the subscription; an error
// wrapping [nats.ErrPermissionViolation], which [Permanent] reports,
// when it refuses it; and the ping's error (nc not connected, ctx ended)
// otherwise. The subscription takes no message for long: subject should
// be one nothing is published on, with a fresh [ReplyToken] in it, say,
// and of the same form as the one the part subscribes to, wildcards
// included, since a permission may allow one form and not another.
func CheckSubscribe(ctx context.Context, nc *nats.Conn, subject string) error {
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return fmt.Errorf("bus: subscribe to %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkSubscribeWait)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("bus: ask NATS whether it lets this connection subscribe to %s: %w", subject, err)
	}
	// nats.go keeps the last asynchronous error of the connection; the
	// server's refusal names the subject, which holds a fresh token.
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) &&
		strings.Contains(err.Error(), `Subscription to "`+subject+`"`) {
		return permanent{fmt.Errorf("NATS refuses this connection's user a subscription to %s: %w", subject, err)}
	}
	return nil
}
