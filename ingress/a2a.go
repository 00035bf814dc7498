package ingress

import (
	"errors"

	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// WithA2A serves the A2A front door ([a2a.Server]) at POST /a2a, with its
// public agent card at /.well-known/agent-card.json, which needs no
// credentials. An A2A task is a job, so the ingress must serve rpc.jobs.*
// ([WithExtension] with the jobs service at schema.MethodJobsPrefix);
// with [WithRegistry] the card lists the live tools as skills. opts
// follow the ingress's own (logger, body and depth limits, authentication).
func WithA2A(opts ...a2a.Option) Option {
	return func(c *config) error {
		c.a2a = append([]a2a.Option{}, opts...)
		c.a2aOn = true
		return nil
	}
}

// newA2A returns the A2A front door, whose calls come back through
// [seam].
func (s *Server) newA2A() (*a2a.Server, error) {
	if s.router == nil || s.router.extensions[schema.MethodJobsPrefix] == nil {
		return nil, errors.New("the A2A front door runs tasks as jobs: serve rpc.jobs.* (turn jobs on) or leave A2A off")
	}
	if _, ok := s.router.extensions[schema.MethodJobsPrefix].(Subscriber); !ok {
		return nil, errors.New("the A2A front door follows tasks with rpc.jobs.subscribe, which the jobs extension does not serve")
	}
	opts := []a2a.Option{a2a.WithLogger(s.log), a2a.WithMaxBodyBytes(s.cfg.limits.MaxBodyBytes), a2a.WithMaxDepth(s.cfg.limits.MaxDepth)}
	if s.auth != nil {
		schemes := a2a.Schemes{JWT: s.cfg.authJWT}
		if s.cfg.authKeys {
			schemes.APIKeyHeader = auth.APIKeyHeader
		}
		opts = append(opts, a2a.WithAuthentication(schemes))
	}
	return a2a.New(seam{s}, s.cfg.registry, append(opts, s.cfg.a2a...)...)
}
