package ingress

import (
	"context"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// authorize returns the -32005 answer of a call its caller may not make,
// or nil. Without [WithAuth] every call is allowed; with it, a call that
// reached the ingress without a caller (a transport that does not pass one
// on) is refused rather than let through.
func (s *Server) authorize(p *auth.Principal, req *schema.Request) *schema.Error {
	if s.auth == nil {
		return nil
	}
	if p == nil {
		return forbidden("", req.Method, schema.ReasonUnauthenticated)
	}
	if !p.Allows(req.Method) {
		return forbidden(p.Name, req.Method, schema.ReasonNotAllowed)
	}
	return nil
}

// Allowed returns the -32005 answer when the caller the ingress
// authenticated for ctx may not call method, or nil. It is for the layers
// behind the chain that run one method on behalf of another, such as
// rpc.jobs.submit (see jobs.WithAuthorize): the ingress has admitted the
// outer call, and with [WithAuth] every admitted call's context carries its
// caller; a context without one comes from an ingress without
// authentication, where every method is allowed.
func Allowed(ctx context.Context, method string) *schema.Error {
	p, ok := ctx.Value(callerKey{}).(*auth.Principal)
	if !ok || p == nil {
		return nil
	}
	if !p.Allows(method) {
		return forbidden(p.Name, method, schema.ReasonNotAllowed)
	}
	return nil
}

func forbidden(caller, method, reason string) *schema.Error {
	msg := "forbidden: " + method + " is not allowed"
	if caller != "" {
		msg += " for " + caller
	}
	return schema.NewError(schema.CodeForbidden, msg,
		map[string]any{"reason": reason, "method": method})
}
