package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

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
// [a2aSeam].
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
	return a2a.New(a2aSeam{s}, s.cfg.registry, append(opts, s.cfg.a2a...)...)
}

// a2aSeam is the one seam between the ingress and its A2A front door, the
// same as [mcpSeam]'s: who sent a request, what it may call, and a way to
// run its calls through the plan and the chain.
type a2aSeam struct{ s *Server }

var _ a2a.Ingress = a2aSeam{}

// Request implements [a2a.Ingress].
func (a a2aSeam) Request(r *http.Request) (a2a.Request, *schema.Error) {
	hdr, err := a.s.callHeaders(r)
	// A task outlives the request that made it: no idempotency key of
	// the HTTP request names the calls the front door makes for it.
	hdr.idemKey = ""
	return a2a.Request{
		Caller:  hdr.caller.String(),
		MayCall: a.s.view(hdr.caller).mayCall,
		Call: func(ctx context.Context, req schema.Request) schema.Response {
			return a.s.call(ctx, hdr, req)
		},
		Hold: func() (func(), *schema.Error) {
			return a.s.holdSubscription(hdr)
		},
		Subscribe: func(ctx context.Context, id string, held func()) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
			return a.s.subscribe(ctx, hdr, id, held)
		},
		Timeout: func(method string) time.Duration {
			return a.s.policy(method, hdr.timeout)
		},
	}, err
}

// holdSubscription counts a subscription of hdr's caller with the jobs
// extension before the job it will follow is submitted, when the
// extension can ([SubscriptionHolder]); release gives it back.
func (s *Server) holdSubscription(hdr callHeaders) (release func(), e *schema.Error) {
	h, ok := s.router.extension(schema.MethodJobsSubscribe).(SubscriptionHolder)
	if !ok {
		return func() {}, nil
	}
	return h.HoldSubscription(callerName(hdr.caller))
}

// subscribe admits rpc.jobs.subscribe of job id for the caller of hdr, as
// [Server.plan] admits any call (authorization, byte budget, rate limit),
// and answers it with the jobs extension. held, when not nil, is the
// release of a subscription [Server.holdSubscription] counted: the
// subscription takes its place rather than counting another.
func (s *Server) subscribe(ctx context.Context, hdr callHeaders, id string, held func()) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	sub, ok := s.router.extension(schema.MethodJobsSubscribe).(Subscriber)
	if !ok {
		return nil, nil, schema.NewError(schema.CodeMethodNotFound, "method not found: "+schema.MethodJobsSubscribe,
			map[string]any{"method": schema.MethodJobsSubscribe})
	}
	if hdr.caller != nil {
		ctx = context.WithValue(ctx, callerKey{}, hdr.caller)
	}
	holder, holds := sub.(SubscriptionHolder)
	var stream func(context.Context, func(string, json.RawMessage))
	local := map[string]localMethod{schema.MethodJobsSubscribe: {serve: func(c schema.Call) (json.RawMessage, *schema.Error) {
		var result json.RawMessage
		var st func(context.Context, func(string, json.RawMessage))
		var e *schema.Error
		if held != nil && holds {
			result, st, e = holder.SubscribeHeld(ctx, c, held)
		} else {
			result, st, e = sub.Subscribe(ctx, c)
		}
		stream = st
		return result, e
	}}}
	params, _ := json.Marshal(map[string]string{"id": id})
	p := s.plan([]element{{req: schema.Request{ID: json.RawMessage(`"a2a-subscribe"`), Method: schema.MethodJobsSubscribe, Params: params}}}, hdr, local)
	defer p.done()
	if len(p.out) != 1 {
		return nil, nil, internalError()
	}
	if out := p.out[0]; out.Error != nil {
		return nil, nil, out.Error
	}
	if stream == nil {
		return nil, nil, internalError()
	}
	return p.out[0].Result, stream, nil
}
