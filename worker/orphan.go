package worker

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
)

// ErrCallerGone is the cause of a handler's context (see
// context.Cause) when nobody listens for the call's answer any more: the
// ingress that sent it died or closed its connection, so the answer
// could reach no one. A handler that sees it may stop at once; whatever
// it answers is dropped.
var ErrCallerGone = errors.New("worker: nobody listens for the call's answer any more")

// probes learns, for the calls that asked for heartbeats, whether anyone
// still listens on their reply subjects. Each progress message of such a
// call carries a reply subject of the runtime's own, one per message
// (prefix, the call's token, a sequence number); when nobody is subscribed
// to the call's reply subject, NATS answers that reply subject with its
// no-responders message, which names the call and the message. A
// delivered progress message gets no answer at all.
type probes struct {
	prefix string // the runtime's inbox and a dot
	// sub receives the no-responders messages; set by Start under
	// Runtime.mu, nil before and after.
	sub *nats.Subscription
	// beats maps the token of each call being probed to its *beat.
	beats sync.Map
}

func newProbes(nc *nats.Conn) *probes {
	return &probes{prefix: nc.NewInbox() + "."}
}

// subject is the reply subject of the seq'th probing message of the call
// with token.
func (p *probes) subject(token string, seq uint64) string {
	return p.prefix + token + "." + strconv.FormatUint(seq, 10)
}

// watch registers b and returns the token of its reply subjects.
func (p *probes) watch(b *beat) string {
	token := nuid.Next()
	p.beats.Store(token, b)
	return token
}

func (p *probes) forget(token string) { p.beats.Delete(token) }

// deliver hands a no-responders message to the call it names.
func (p *probes) deliver(msg *nats.Msg) {
	if !bus.NoResponders(msg) {
		return // nothing else is ever sent here
	}
	token, seq, ok := strings.Cut(strings.TrimPrefix(msg.Subject, p.prefix), ".")
	if !ok {
		return
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return
	}
	if b, ok := p.beats.Load(token); ok {
		b.(*beat).unheard(n)
	}
}

// subscribeProbes subscribes to the runtime's probe replies. rt.mu must be
// held.
func (rt *Runtime) subscribeProbes() error {
	sub, err := rt.nc.Subscribe(rt.probes.prefix+"*.*", rt.probes.deliver)
	if err != nil {
		return err
	}
	rt.probes.sub = sub
	return nil
}

// stopProbes ends the probe subscription once no call runs any more.
func (rt *Runtime) stopProbes() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.unsubscribeProbes()
}

// unsubscribeProbes ends the probe subscription. rt.mu must be held.
func (rt *Runtime) unsubscribeProbes() {
	sub := rt.probes.sub
	rt.probes.sub = nil
	if sub != nil {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			rt.log.Warn("unsubscribe from probe replies", "err", err)
		}
	}
}

// run counts the latest unbroken run of probing messages of one call
// that found nobody listening. The zero value has seen none.
type run struct{ first, last uint64 }

// unheard records that message seq found nobody listening and returns
// the length of the run it ends. Messages are numbered from 1; a number
// that does not follow the last one starts a new run, since the messages
// in between were delivered (or never probed).
func (r *run) unheard(seq uint64) uint64 {
	if r.last == 0 || seq != r.last+1 {
		r.first = seq
	}
	r.last = seq
	return r.last - r.first + 1
}
