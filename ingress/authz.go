package ingress

import (
	"context"

	"github.com/toolbus/toolbus/schema"
)

// authorize returns the -32005 answer of a call its caller may not make,
// or nil. Without [WithAuth] every call is allowed; with it, a call that
// reached the ingress without a caller (a transport that does not pass one
// on) is refused rather than let through.
func (s *Server) authorize(p *principal, req *schema.Request) *schema.Error {
	if s.auth == nil {
		return nil
	}
	if p == nil {
		return forbidden("", req.Method, schema.ReasonUnauthenticated)
	}
	if !allowed(p.allow, req.Method) {
		return forbidden(p.name, req.Method, schema.ReasonNotAllowed)
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
	p, ok := ctx.Value(callerKey{}).(*principal)
	if !ok || p == nil {
		return nil
	}
	if !allowed(p.allow, method) {
		return forbidden(p.name, method, schema.ReasonNotAllowed)
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

// allowed reports whether method matches one of patterns.
func allowed(patterns []string, method string) bool {
	for _, p := range patterns {
		if schema.MatchMethod(p, method) {
			return true
		}
	}
	return false
}

// checkPatterns refuses patterns that can match nothing.
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if err := schema.ValidatePattern(p); err != nil {
			return err
		}
	}
	return nil
}
