package worker

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// DefaultAnnounceInterval is how often a runtime announces its tools
// unless [WithAnnounce] or [WithoutAnnounce] says otherwise. Listeners
// forget a worker after three intervals without news of it.
const DefaultAnnounceInterval = time.Second

// WithAnnounce sets how often the runtime announces its tools (zero means
// [DefaultAnnounceInterval]; at most [bus.MaxAnnounceInterval]). Once
// started, a runtime announces the descriptor of each of its methods (see
// [Runtime.Descriptors]) on that method's own announce subject
// ([bus.Subjects.AnnounceMethod]) every interval, at once when a method is
// registered or a listener asks, and one last time, as leaving, when it
// shuts down, so that the ingress's discovery registry follows it (see
// schema/PROTOCOL.md, section 9). Since each method has its subject, the
// worker's NATS permissions decide which tools it may announce: grant it
// "<prefix>.discovery.announce." and the patterns it serves. A runtime
// announces by default, every [DefaultAnnounceInterval], as `toolbus
// worker` does; [WithoutAnnounce] turns it off. The call path does not
// change: announcing only adds the announce and ping subjects.
func WithAnnounce(interval time.Duration) Option {
	return func(c *config) error {
		if interval < 0 || interval > bus.MaxAnnounceInterval {
			return fmt.Errorf("worker: announce interval must be between 0 and %v, got %v; listeners forget a worker after three intervals of at most %v", bus.MaxAnnounceInterval, interval, bus.MaxAnnounceInterval)
		}
		if interval == 0 {
			interval = DefaultAnnounceInterval
		}
		c.announce = interval
		return nil
	}
}

// WithoutAnnounce keeps the runtime from announcing its tools, for a
// worker whose NATS user may not publish announcements or a cluster that
// runs without discovery (`toolbus worker --announce=false`).
func WithoutAnnounce() Option {
	return func(c *config) error {
		c.announce = 0
		return nil
	}
}

// advertiser announces a runtime's tools. Its methods are nil-safe, so the
// runtime calls them whether or not discovery is on.
type advertiser struct {
	rt *Runtime
	id string

	kick chan struct{} // asks the loop to announce now
	quit chan struct{}
	done chan struct{} // closed when the loop has returned

	stopOnce sync.Once
	mu       sync.Mutex // serializes announcements with the last one
	started  bool
	stopped  bool
	ping     *nats.Subscription
}

func newAdvertiser(rt *Runtime) *advertiser {
	return &advertiser{
		rt:   rt,
		id:   rt.id,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
}

// start subscribes to pings and starts the announcing loop. It may run
// under the runtime's lock: it never takes it.
func (a *advertiser) start() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.stopped {
		return
	}
	a.started = true
	sub, err := a.rt.nc.Subscribe(a.rt.cfg.subjects.DiscoveryPing(), func(*nats.Msg) { a.changed() })
	if err != nil {
		// Announcing on the interval still works; listeners only learn of
		// this worker a little later.
		a.rt.log.Warn("cannot subscribe to discovery pings", "err", err)
	}
	a.ping = sub
	a.changed()
	go a.loop()
}

// changed asks for an announcement at once. It never blocks.
func (a *advertiser) changed() {
	if a == nil {
		return
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *advertiser) loop() {
	defer close(a.done)
	t := time.NewTicker(a.rt.cfg.announce)
	defer t.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-t.C:
		case <-a.kick:
		}
		a.announce(false)
	}
}

// announce publishes the runtime's descriptors, one message per method;
// leaving makes it the last announcement, one message per method with its
// name alone, after which nothing more is published.
func (a *advertiser) announce(leaving bool) {
	tools := a.rt.Descriptors()
	if leaving {
		for i, d := range tools {
			tools[i] = schema.Descriptor{Name: d.Name}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	if leaving {
		a.stopped = true
	}
	ann := schema.Announcement{
		V:          schema.AnnouncementVersion,
		Worker:     a.id,
		IntervalMS: a.rt.cfg.announce.Milliseconds(),
		Leaving:    leaving,
		Tools:      tools,
	}
	if err := bus.PublishAnnouncement(a.rt.nc, a.rt.cfg.subjects, ann); err != nil {
		a.rt.log.Debug("announcement not published", "leaving", leaving, "err", err)
	}
}

// stop sends the last announcement, so that listeners drop this worker's
// tools before it drains, and waits for the loop to end.
func (a *advertiser) stop() {
	if a == nil {
		return
	}
	a.stopOnce.Do(a.stopOnceFn)
}

func (a *advertiser) stopOnceFn() {
	a.mu.Lock()
	started, stopped, ping := a.started, a.stopped, a.ping
	a.mu.Unlock()
	if !started || stopped {
		// Never started: nothing was announced, and start must not
		// begin now.
		a.mu.Lock()
		a.stopped = true
		a.mu.Unlock()
		return
	}
	if ping != nil {
		if err := ping.Unsubscribe(); err != nil {
			a.rt.log.Debug("unsubscribe from discovery pings", "err", err)
		}
	}
	a.announce(true)
	close(a.quit)
	<-a.done
}
