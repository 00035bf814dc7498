package ingress

import (
	"encoding/json"

	"github.com/toolbus/toolbus/schema"
)

// jobsSubmit is the extension method that runs another method as a job; a
// caller may submit only methods it may call.
const jobsSubmit = "rpc.jobs.submit"

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
	if req.Method == jobsSubmit {
		var inner struct {
			Method string `json:"method"`
		}
		// Params that do not decode are the jobs service's to refuse.
		if json.Unmarshal(req.Params, &inner) == nil && inner.Method != "" && !allowed(p.allow, inner.Method) {
			return forbidden(p.name, inner.Method, schema.ReasonNotAllowed)
		}
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
