package bus

import (
	"time"

	"github.com/nats-io/nats.go"
)

// Drain closes nc after delivering what it holds: its subscriptions stop
// taking messages and handle those they have, and what it has published is
// flushed. It returns once nc is closed, at the latest a second after the
// connection's drain timeout ([WithDrainTimeout]), when it closes nc
// itself; a connection that cannot drain (already closed, or never
// connected) is closed at once. nc's own closed handler still runs.
func Drain(nc *nats.Conn) {
	closed := make(chan struct{})
	prev := nc.ClosedHandler()
	nc.SetClosedHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		close(closed)
	})
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	timeout := nc.Opts.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	t := time.NewTimer(timeout + time.Second)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		nc.Close()
	}
}

// DrainSubscription stops sub taking messages and lets it handle those it
// holds. On a connection that is not up it unsubscribes instead: such a
// connection holds nothing of the server's to drain, and a drain would
// wait for the server. The subscription's closed handler runs either way,
// unless it was closed already, which is the one error returned.
func DrainSubscription(nc *nats.Conn, sub *nats.Subscription) error {
	if !nc.IsConnected() {
		return sub.Unsubscribe()
	}
	return sub.Drain()
}
