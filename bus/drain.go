package bus

import (
	"log/slog"
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

// slowDrainAfter is how long a drain may take before [DrainLogged] says
// that the shutdown waits for it.
const slowDrainAfter = 2 * time.Second

// DrainLogged is [Drain], and writes a warning to log when the drain
// takes longer than two seconds, so that a shutdown that hangs says where.
func DrainLogged(nc *nats.Conn, log *slog.Logger) {
	began := time.Now()
	slow := time.AfterFunc(slowDrainAfter, func() {
		log.Warn("shutdown: still waiting for the NATS connection to drain",
			"waited", time.Since(began).Round(time.Millisecond).String(), "connected", nc.IsConnected())
	})
	defer slow.Stop()
	Drain(nc)
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
