package ingress

import (
	"errors"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Deadline is a deadline policy: the deadline a call of method gets when
// its client asked for requested (zero: nothing asked), such as the
// smallest of the request, the method's timeout and the server maximum
// (DESIGN.md, "Deadlines"). It must be a bound: asked again with a
// deadline it gave, it gives the same, so that the layers behind the
// ingress may apply it to a call whose deadline is settled already.
type Deadline func(method string, requested time.Duration) time.Duration

// defaultDeadline bounds a call the ingress itself must put a deadline on
// (a body waiting for its turn, a call waiting in its caller's queue, an
// extension call) when no policy is declared and the client asked for
// none, or for more.
const defaultDeadline = 30 * time.Second

// WithDeadline declares the deadline policy of the ingress's calls. The
// ingress settles each call's deadline with it once, when it plans the
// call (after the timeout a tool announces, with [WithRegistry]), and
// hands it down the chain in [schema.Call.Timeout]: the fairness layer
// queues the call under it, extensions run under it, and the dispatcher
// at the end gets it as the deadline asked for. The A2A front door waits
// for a task as long as the policy says. A gateway made by package node
// declares its aggregator's ([aggregator.Aggregator.Timeout]). Without a
// policy a call carries the client's wish as it came (zero when none),
// and where the ingress needs a deadline of its own it takes that wish,
// at most 30 seconds.
func WithDeadline(p Deadline) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("ingress: nil deadline policy")
		}
		c.deadline = p
		return nil
	}
}

// policy is the deadline the declared policy gives a call of method
// whose client asked for requested; requested itself without a policy.
func (s *Server) policy(method string, requested time.Duration) time.Duration {
	if s.cfg.deadline == nil {
		return requested
	}
	return s.cfg.deadline(method, requested)
}

// settleDeadline is the deadline a call of method carries down the chain
// when its client asked for requested: with [WithRegistry], the tool's
// own timeout as its workers announce it bounds the request (as the
// discovery layer does behind the fairness layer, so that a call's wait
// in its queue counts too), and then the policy applies.
func (s *Server) settleDeadline(method string, requested time.Duration) time.Duration {
	if s.cfg.registry != nil && !schema.IsReserved(method) {
		if t, ok := s.cfg.registry.Lookup(method); ok {
			if d := time.Duration(t.TimeoutMS) * time.Millisecond; d > 0 && (requested <= 0 || d < requested) {
				requested = d
			}
		}
	}
	return s.policy(method, requested)
}

// deadline is the deadline the ingress itself puts on a call of method
// (or a body, method "") that carries timeout: the declared policy's,
// which keeps a settled deadline as it is; without a policy, timeout
// when there is one under [defaultDeadline], else defaultDeadline.
func (s *Server) deadline(method string, timeout time.Duration) time.Duration {
	if s.cfg.deadline != nil {
		return s.cfg.deadline(method, timeout)
	}
	if timeout > 0 && timeout < defaultDeadline {
		return timeout
	}
	return defaultDeadline
}
