package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/schema"
)

// seam is the one seam between the ingress and its front doors, MCP and
// A2A alike: who sent a request, what it may call, and the ways to run
// its calls and follow its jobs through the plan and the chain.
type seam struct{ s *Server }

var _ door.Ingress = seam{}

// Request implements [door.Ingress]: the caller the authentication
// middleware found, what it may call, and the request's call headers.
func (d seam) Request(r *http.Request) (door.Request, *schema.Error) {
	hdr, err := d.s.callHeaders(r)
	return door.Request{
		Caller:  hdr.caller.String(),
		MayCall: d.s.view(hdr.caller).mayCall,
		Call: func(ctx context.Context, req schema.Request) schema.Response {
			return d.s.call(ctx, hdr, req)
		},
		Hold: func() (func(), *schema.Error) {
			return d.s.holdSubscription(hdr)
		},
		Subscribe: func(ctx context.Context, id string, held func()) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
			return d.s.subscribe(ctx, hdr, id, held)
		},
		Timeout: func(method string) time.Duration {
			return d.s.policy(method, hdr.timeout)
		},
	}, err
}

// call runs one call through the plan and the chain and returns its
// answer. The MCP SDK's handler context does not descend from the HTTP
// request's, so the caller is put in it as the authentication middleware
// puts it in every other transport's (see [Caller]).
func (s *Server) call(ctx context.Context, hdr callHeaders, req schema.Request) schema.Response {
	if hdr.caller != nil {
		ctx = context.WithValue(ctx, callerKey{}, hdr.caller)
	}
	p := s.plan([]element{{req: req}}, hdr, nil)
	defer p.done()
	s.dispatch(ctx, &p)
	if len(p.out) != 1 {
		return schema.Response{ID: req.ID, Error: internalError()}
	}
	return p.out[0].Response
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
