package ingress

import (
	"errors"

	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// A2AConfig is how the A2A front door of [WithA2A] names itself and what
// it lets its callers do; the ingress adds its own logger, body and depth
// limits and authentication.
type A2AConfig struct {
	// Name is the agent's name on its card (the cluster's prefix in a
	// gateway). Default "toolbus".
	Name string
	// TextMethod is the method a message of text alone goes to. Default
	// none: such a message is refused.
	TextMethod string
	// PublicSkills are the method patterns the public card lists while
	// authentication is on. Default none.
	PublicSkills []string
	// Push keeps the tasks' push notification configs, and Guard checks
	// the URLs they are sent to; a Push needs a Guard. Without Push, push
	// notifications are not offered and Guard is not used.
	Push  *a2a.PushStore
	Guard *egress.Guard
	// PushCallerMaxConfigs and PushCallerMaxBytes bound one caller's push
	// configs (zero: [a2a.DefaultPushCallerMaxConfigs],
	// [a2a.DefaultPushCallerMaxBytes]).
	PushCallerMaxConfigs int
	PushCallerMaxBytes   int64
}

// options returns c as the door's options.
func (c A2AConfig) options() []a2a.Option {
	var opts []a2a.Option
	if c.Name != "" {
		opts = append(opts, a2a.WithName(c.Name))
	}
	if c.TextMethod != "" {
		opts = append(opts, a2a.WithTextMethod(c.TextMethod))
	}
	if len(c.PublicSkills) > 0 {
		opts = append(opts, a2a.WithPublicSkills(c.PublicSkills...))
	}
	if c.Push != nil {
		opts = append(opts, a2a.WithPush(c.Push, c.Guard))
	}
	if c.PushCallerMaxConfigs != 0 || c.PushCallerMaxBytes != 0 {
		maxConfigs, maxBytes := c.PushCallerMaxConfigs, c.PushCallerMaxBytes
		if maxConfigs == 0 {
			maxConfigs = a2a.DefaultPushCallerMaxConfigs
		}
		if maxBytes == 0 {
			maxBytes = a2a.DefaultPushCallerMaxBytes
		}
		opts = append(opts, a2a.WithPushCallerLimits(maxConfigs, maxBytes))
	}
	return opts
}

// WithA2A serves the A2A front door ([a2a.Server]) configured by c at
// POST /a2a, with its public agent card at /.well-known/agent-card.json,
// which needs no credentials. An A2A task is a job, so the ingress must
// serve rpc.jobs.* ([WithExtension] with the jobs service at
// schema.MethodJobsPrefix); with [WithRegistry] the card lists the live
// tools as skills.
func WithA2A(c A2AConfig) Option {
	return func(cfg *config) error {
		if c.Push != nil && c.Guard == nil {
			return errors.New("ingress: the A2A door's push notifications need a Guard for the URLs they are sent to")
		}
		cfg.a2a = c.options()
		cfg.a2aOn = true
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
