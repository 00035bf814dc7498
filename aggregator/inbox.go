package aggregator

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/schema"
)

// inbox receives every reply and progress message of one aggregator on one
// wildcard subscription, and hands each to the call waiting for it. A call
// keeps its reply subject across its attempts, so whichever worker answers
// first is heard.
type inbox struct {
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	waiting map[string]*pending
}

// pending is what one call waits on.
type pending struct {
	// reply holds the first replies; more than fit are dropped, since only
	// the first counts.
	reply chan *nats.Msg
	// progress holds the latest progress value not yet read; an older one
	// not read is replaced, since only the newest matters.
	progress chan string
}

func newInbox(nc *nats.Conn) (*inbox, error) {
	in := &inbox{prefix: nc.NewInbox() + ".", waiting: map[string]*pending{}}
	sub, err := nc.Subscribe(in.prefix+"*", in.deliver)
	if err != nil {
		return nil, fmt.Errorf("aggregator: subscribe to replies: %w", err)
	}
	// A burst of replies must never be dropped by the client for being
	// slow; the handler only hands messages over.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("aggregator: reply subscription: %w", err)
	}
	in.sub = sub
	return in, nil
}

// open returns a fresh reply subject and what its messages arrive on;
// close forgets it.
func (in *inbox) open() (subject string, p *pending, close func()) {
	token := nuid.Next()
	p = &pending{reply: make(chan *nats.Msg, 1), progress: make(chan string, 1)}
	in.mu.Lock()
	in.waiting[token] = p
	in.mu.Unlock()
	return in.prefix + token, p, func() {
		in.mu.Lock()
		delete(in.waiting, token)
		in.mu.Unlock()
	}
}

func (in *inbox) deliver(msg *nats.Msg) {
	token := msg.Subject[len(in.prefix):]
	in.mu.Lock()
	p := in.waiting[token]
	in.mu.Unlock()
	if p == nil {
		return // a late answer, or one of a call already answered
	}
	if v := msg.Header.Get(schema.HeaderProgress); v != "" {
		select {
		case p.progress <- v:
		default:
			// Replace the unread value: drain it, then offer again. Only
			// this goroutine sends, so the second send cannot block.
			select {
			case old := <-p.progress:
				if old == schema.ProgressBusy && v != schema.ProgressBusy {
					v = old // a refusal must not be lost behind a beat
				}
			default:
			}
			p.progress <- v
		}
		return
	}
	select {
	case p.reply <- msg:
	default:
	}
}
