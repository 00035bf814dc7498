package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// Limits of what a worker announces (PROTOCOL.md, section 9). A listener
// refuses a descriptor over one of them as broken, naming the limit, so
// that no worker can fill rpc.discover, the MCP tool list or the bucket
// of known tools with text of any length.
const (
	// MaxDescriptionBytes bounds a descriptor's description.
	MaxDescriptionBytes = 2 << 10
	// MaxVersionBytes bounds a descriptor's version string.
	MaxVersionBytes = 64
	// MaxDescriptorBytes bounds a whole descriptor, its schemas included,
	// written as compact JSON.
	MaxDescriptorBytes = 64 << 10
	// MaxWorkerIDBytes bounds the worker id of an announcement; a
	// listener ignores an announcement with a longer one, or with
	// control characters in it.
	MaxWorkerIDBytes = 128
	// MaxAnnounceInterval is the longest interval a worker may announce
	// at: a listener takes a longer interval_ms as this, and so forgets a
	// silent worker within three times it, whatever the worker claimed.
	MaxAnnounceInterval = 5 * time.Minute
)

// CheckDescriptorLimits returns an error wrapping
// [schema.ErrBadDescriptor] that names the limit d is over, or nil when d
// is within [MaxDescriptionBytes], [MaxVersionBytes] and
// [MaxDescriptorBytes]. It checks sizes only; [schema.Descriptor.Validate]
// checks the rest.
func CheckDescriptorLimits(d schema.Descriptor) error {
	if n := len(d.Description); n > MaxDescriptionBytes {
		return fmt.Errorf("%w: the description is %d bytes, over the limit of %d bytes on descriptions; shorten it", schema.ErrBadDescriptor, n, MaxDescriptionBytes)
	}
	if n := len(d.Version); n > MaxVersionBytes {
		return fmt.Errorf("%w: the version is %d bytes, over the limit of %d bytes on versions; shorten it", schema.ErrBadDescriptor, n, MaxVersionBytes)
	}
	// The encoder writes raw schemas compact, so that white space counts
	// for nothing, and leaves '<', '>' and '&' as they are.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return fmt.Errorf("%w: %w", schema.ErrBadDescriptor, err)
	}
	if n := len(bytes.TrimSuffix(b.Bytes(), []byte("\n"))); n > MaxDescriptorBytes {
		return fmt.Errorf("%w: the descriptor is %d bytes as compact JSON, over the limit of %d bytes on descriptors; make its schemas smaller", schema.ErrBadDescriptor, n, MaxDescriptorBytes)
	}
	return nil
}

// Announce returns the one subject on which workers older than revision 8
// published their whole announcement, "<prefix>.discovery.announce". A
// listener still hears it for a release (see [Announcements]); a worker
// announces on [Subjects.AnnounceMethod] instead.
func (s Subjects) Announce() string { return s.prefix + ".discovery.announce" }

// Escaped subject tokens of the wildcard tokens of a pattern, which cannot
// be published literally. '%' is outside the method grammar, so no method
// token reads as one of them.
const (
	announceStar = "%2A"
	announceGT   = "%3E"
)

// AnnounceMethod returns the subject on which a worker announces the
// method or pattern name (revision 8): [Subjects.Announce], a dot, and
// name's tokens, a '*' token written "%2A" and a '>' token "%3E". So
// "math.add" is announced on "toolbus.discovery.announce.math.add" and
// "math.*" on "toolbus.discovery.announce.math.%2A", and NATS permissions
// on these subjects decide which tools a credential may announce. It fails
// for a name outside the grammar of patterns and for a reserved rpc.*
// name.
func (s Subjects) AnnounceMethod(name string) (string, error) {
	if err := schema.ValidatePattern(name); err != nil {
		return "", fmt.Errorf("bus: %w", err)
	}
	if schema.IsReserved(name) {
		return "", fmt.Errorf("bus: method %q is reserved for the ingress", name)
	}
	tokens := strings.Split(name, ".")
	for i, t := range tokens {
		switch t {
		case "*":
			tokens[i] = announceStar
		case ">":
			tokens[i] = announceGT
		}
	}
	return s.Announce() + "." + strings.Join(tokens, "."), nil
}

// AnnouncedMethod returns the method or pattern an announce subject of
// revision 8 names (the inverse of [Subjects.AnnounceMethod]), or false
// when subject is not under [Subjects.Announce] and a dot. The name is
// not checked against the grammar: a listener compares it with the
// descriptor the message carries, which is.
func (s Subjects) AnnouncedMethod(subject string) (string, bool) {
	p := s.Announce() + "."
	if !strings.HasPrefix(subject, p) || len(subject) == len(p) {
		return "", false
	}
	tokens := strings.Split(subject[len(p):], ".")
	for i, t := range tokens {
		switch t {
		case announceStar:
			tokens[i] = "*"
		case announceGT:
			tokens[i] = ">"
		}
	}
	return strings.Join(tokens, "."), true
}

// DiscoveryPing returns the subject on which a listener that just started
// asks every worker to announce now, rather than at its next interval. The
// body is empty; workers answer on their announce subjects, not by reply,
// so that every listener learns from it.
func (s Subjects) DiscoveryPing() string { return s.prefix + ".discovery.ping" }

// PublishAnnouncement publishes a as revision 8 has it: one message per
// descriptor of a.Tools, on [Subjects.AnnounceMethod] of its name, each
// carrying a with that descriptor alone (a leaving announcement too, so
// that a listener learns which method leaves). An announcement without
// tools publishes nothing. It publishes every descriptor it can, and
// returns what failed.
func PublishAnnouncement(nc *nats.Conn, s Subjects, a schema.Announcement) error {
	var errs []error
	for _, d := range a.Tools {
		subject, err := s.AnnounceMethod(d.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("bus: announce %q: %w", d.Name, err))
			continue
		}
		one := a
		one.Tools = []schema.Descriptor{d}
		b, err := json.Marshal(one)
		if err != nil {
			errs = append(errs, fmt.Errorf("bus: encode the announcement of %q: %w", d.Name, err))
			continue
		}
		if err := nc.Publish(subject, b); err != nil {
			errs = append(errs, fmt.Errorf("bus: publish the announcement of %q: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
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

// Watch calls fn with the body of every announcement, one at a time, then
// asks every worker to announce at once. method is the method or pattern
// the subject of a revision 8 announcement names ([Subjects.AnnouncedMethod]),
// or "" for one on the shared subject of older workers
// ([Subjects.Announce]). stop ends both subscriptions; fn is not called
// after stop returns.
func (a *Announcements) Watch(fn func(method string, data []byte)) (stop func(), err error) {
	var mu sync.Mutex // the two subscriptions deliver on goroutines of their own
	shared, err := a.nc.Subscribe(a.s.Announce(), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		fn("", m.Data)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe to announcements: %w", err)
	}
	perMethod, err := a.nc.Subscribe(a.s.Announce()+".>", func(m *nats.Msg) {
		method, ok := a.s.AnnouncedMethod(m.Subject)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fn(method, m.Data)
	})
	if err != nil {
		_ = shared.Unsubscribe()
		return nil, fmt.Errorf("bus: subscribe to announcements: %w", err)
	}
	// The ping must reach the workers after the subscriptions reached the
	// server, or their answers could pass before them. When that fails,
	// or the connection is not up yet, the workers are heard at their
	// next interval anyway.
	if a.nc.IsConnected() && a.nc.Flush() == nil {
		_ = a.nc.Publish(a.s.DiscoveryPing(), nil)
	}
	subs := []*nats.Subscription{shared, perMethod}
	done := make([]chan struct{}, len(subs))
	for i, sub := range subs {
		done[i] = make(chan struct{})
		sub.SetClosedHandler(func(string) { close(done[i]) })
	}
	return func() {
		for i, sub := range subs {
			// Only an already closed subscription fails to drain, and
			// then its closed handler has run.
			if DrainSubscription(a.nc, sub) == nil {
				<-done[i]
			}
		}
	}, nil
}
