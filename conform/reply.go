package conform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// replySleep is how long the call of the reply-subject rule runs: a few
// heartbeats, so that a worker that speaks rule 8 beats on the subject.
const replySleep = 3 * heartbeat

// checkReplySubject sends a call whose reply subject is of the form an
// ingress gives its calls since revision 10, <prefix>.reply.<ingress>.<call>
// (section 3, "Reply subjects"), and checks that everything the worker
// sends about it, the ack and beats of rule 8 too, comes there.
func checkReplySubject(ctx context.Context, s *session, r rule) Result {
	subject := s.subjects.Replies() + "." + bus.ReplyToken() + "." + bus.ReplyToken()
	if err := bus.CheckSubscribe(ctx, s.nc, subject); err != nil {
		if errors.Is(err, nats.ErrPermissionViolation) {
			return r.skip(fmt.Sprintf("the kit's NATS user may not subscribe to %s (%v): grant it %s.> to run this rule", subject, err, s.subjects.Replies()))
		}
		return r.fail("", "", err.Error())
	}
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	c := call{method: "conform.sleep", id: s.id(), params: fmt.Sprintf(`{"ms":%d}`, replySleep.Milliseconds()),
		callID: nuid.Next(), deadline: time.Now().Add(30 * time.Second)}
	want := fmt.Sprintf(`result {"slept_ms":%d} on the reply subject as it came`, replySleep.Milliseconds())
	if live.acks {
		c.heartbeat, c.misses = heartbeat, misses
		want = "the ack, the beats and " + want
	}
	sent := c.String() + " with reply subject " + subject
	x, err := s.sendReplyingOn(c, subject)
	if err != nil {
		return r.fail(sent, want, err.Error())
	}
	defer x.close()
	h, ok := x.await(replySleep + answerWait)
	if !ok {
		return r.fail(sent, want, fmt.Sprintf("nothing on it within %v, though the worker answers calls whose reply subject is an inbox: "+
			"it must answer on the reply subject a call has, whatever its form, without parsing or rebuilding it", replySleep+answerWait))
	}
	if reply, err := decode(h.msg); err != nil || reply.Error != nil || !sameJSON(reply.Result, fmt.Appendf(nil, `{"slept_ms":%d}`, replySleep.Milliseconds())) {
		return r.fail(sent, want, describe(h.msg))
	}
	if !live.acks {
		return r.pass("the reply came on it; the worker sends no progress message (rule 8 is optional)")
	}
	acked := false
	for _, p := range x.progress {
		acked = acked || p.msg.Header.Get(schema.HeaderProgress) == schema.ProgressAck
	}
	if !acked {
		return r.fail(sent, want, fmt.Sprintf("the reply, and %d progress messages but no ack on it, though the worker acknowledges calls whose reply subject is an inbox", len(x.progress)))
	}
	return r.pass(fmt.Sprintf("the reply and %d progress messages came on it", len(x.progress)))
}

// sendReplyingOn sends c with reply subject reply, on which it listens.
func (s *session) sendReplyingOn(c call, reply string) (*exchange, error) {
	ch := make(chan *nats.Msg, 4096)
	sub, err := s.nc.ChanSubscribe(reply, ch)
	if err != nil {
		return nil, fmt.Errorf("conform: subscribe to %s: %w", reply, err)
	}
	c.reply = reply
	x, err := s.send(c)
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	x.ch, x.sub = ch, sub
	return x, nil
}
