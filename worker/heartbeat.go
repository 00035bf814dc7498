package worker

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// Bounds of the heartbeat interval an aggregator may ask for; a value
// outside is brought inside rather than refused, so that a call is never
// lost over it.
const (
	minHeartbeat = 10 * time.Millisecond
	maxHeartbeat = time.Minute
)

// beat sends the progress messages of one call to the aggregator that asked
// for them with [schema.HeaderHeartbeat]: an ack when the call starts, a
// heartbeat every interval while it runs, or a busy refusal instead of
// either. A nil *beat (nobody asked) sends nothing. Its methods are safe
// for concurrent use.
type beat struct {
	nc       *nats.Conn
	reply    string
	interval time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// heartbeat returns the beat of msg, or nil when msg asks for none: a
// notification, or a call from an aggregator that does not speak the
// liveness protocol.
func (rt *Runtime) heartbeat(msg *nats.Msg) *beat {
	if msg.Reply == "" {
		return nil
	}
	v := msg.Header.Get(schema.HeaderHeartbeat)
	if v == "" {
		return nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return nil
	}
	d := min(max(time.Duration(ms)*time.Millisecond, minHeartbeat), maxHeartbeat)
	return &beat{nc: rt.nc, reply: msg.Reply, interval: d}
}

// asked reports whether the aggregator speaks the liveness protocol, and
// so understands a busy refusal.
func (b *beat) asked() bool { return b != nil }

// send publishes one progress message. A failure is not worth a log line:
// the aggregator notices the silence, which is the point.
func (b *beat) send(v string) {
	_ = b.nc.PublishMsg(&nats.Msg{Subject: b.reply, Header: nats.Header{schema.HeaderProgress: []string{v}}})
}

// busy refuses the call: the worker has no room for it.
func (b *beat) busy() {
	if b != nil {
		b.send(schema.ProgressBusy)
	}
}

// start acknowledges the call and sends a heartbeat every interval until
// stop.
func (b *beat) start() {
	if b == nil {
		return
	}
	b.send(schema.ProgressAck)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		b.timer = time.AfterFunc(b.interval, b.tick)
	}
}

func (b *beat) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.send(schema.ProgressBeat)
	b.timer.Reset(b.interval)
}

// stop ends the heartbeats; none is sent after stop returns.
func (b *beat) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
}
