package ingress

import (
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// admit decides, for one call of a message, whether it goes to the
// dispatcher: its caller must be allowed the method (-32005 otherwise), its
// answers waiting to be written must be under its byte budget, and its
// caller's token bucket must hold a token (-32002 otherwise). A call
// refused here is answered for its own id alone; the rest of its batch goes
// on. The in-flight caps, global, per caller and per method, are the
// aggregator's.
func (s *Server) admit(p *auth.Principal, req *schema.Request) *schema.Error {
	if e := s.authorize(p, req); e != nil {
		return e
	}
	if e := s.bytes.Admit(p.String()); e != nil {
		return e
	}
	return s.limiter.Admit(p.String())
}
