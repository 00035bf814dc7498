package bus

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// Announce returns the subject on which workers publish their
// [schema.Announcement]s: every interval, at once when their tools change
// or when asked on [Subjects.DiscoveryPing], and once more when they stop.
func (s Subjects) Announce() string { return s.prefix + ".discovery.announce" }

// DiscoveryPing returns the subject on which a listener that just started
// asks every worker to announce now, rather than at its next interval. The
// body is empty; workers answer on [Subjects.Announce], not by reply, so
// that every listener learns from it.
func (s Subjects) DiscoveryPing() string { return s.prefix + ".discovery.ping" }

// PublishAnnouncement publishes a as JSON on the announce subject.
func PublishAnnouncement(nc *nats.Conn, s Subjects, a schema.Announcement) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("bus: encode announcement: %w", err)
	}
	if err := nc.Publish(s.Announce(), b); err != nil {
		return fmt.Errorf("bus: publish announcement: %w", err)
	}
	return nil
}

// Announcements hears the workers' announcements of one cluster. It is the
// feed of the ingress's registry. The zero value is not usable; make one
// with [NewAnnouncements].
type Announcements struct {
	nc *nats.Conn
	s  Subjects
}

// NewAnnouncements returns the announcements of the cluster under s, heard
// on nc, which the caller keeps owning.
func NewAnnouncements(nc *nats.Conn, s Subjects) (*Announcements, error) {
	if nc == nil {
		return nil, errors.New("bus: nil nats connection")
	}
	return &Announcements{nc: nc, s: s}, nil
}

// Watch calls fn with the body of every announcement, one at a time on the
// subscription's goroutine, then asks every worker to announce at once.
// stop ends the subscription; fn is not called after stop returns.
func (a *Announcements) Watch(fn func(data []byte)) (stop func(), err error) {
	sub, err := a.nc.Subscribe(a.s.Announce(), func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe to announcements: %w", err)
	}
	// The ping must reach the workers after the subscription reached the
	// server, or their answers could pass before it. When that fails, or
	// the connection is not up yet, the workers are heard at their next
	// interval anyway.
	if a.nc.IsConnected() && a.nc.Flush() == nil {
		_ = a.nc.Publish(a.s.DiscoveryPing(), nil)
	}
	done := make(chan struct{})
	sub.SetClosedHandler(func(string) { close(done) })
	return func() {
		// Only an already closed subscription fails to drain, and then
		// its closed handler has run.
		if DrainSubscription(a.nc, sub) == nil {
			<-done
		}
	}, nil
}
