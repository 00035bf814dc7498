package ingress

import (
	"context"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
)

// view is what one caller may see of what the ingress knows, as
// [auth.Config] says: the methods it may call, in discovery and on the dashboard, and
// its own errors and jobs, or, for an operator, every caller's data.
// Without [WithAuth] the one anonymous caller sees everything. The zero
// view, that of a request with no caller while authentication is on, sees
// nothing.
type view struct {
	open     bool // no authentication
	caller   string
	allow    []string
	operator bool
}

// view returns the view of p, the caller of a request.
func (s *Server) view(p *auth.Principal) view {
	switch {
	case s.auth == nil:
		return view{open: true}
	case p == nil:
		return view{}
	}
	return view{caller: p.Name, allow: p.Allow, operator: p.Operator}
}

// requestView returns the view of the caller the authentication middleware
// found for the request whose context is ctx, as [Caller] reads it.
func (s *Server) requestView(ctx context.Context) view {
	p, _ := ctx.Value(callerKey{}).(*auth.Principal)
	return s.view(p)
}

// mayCall reports whether the caller may call every method that name, a
// method or a pattern a worker serves, matches. Discovery lists such names
// alone, for operators too: what a caller may call is its patterns.
func (v view) mayCall(name string) bool {
	if v.open {
		return true
	}
	for _, p := range v.allow {
		if schema.CoversPattern(p, name) {
			return true
		}
	}
	return false
}

// allCallers reports whether the caller sees every caller's data: its
// jobs, errors and the methods it may not call.
func (v view) allCallers() bool { return v.open || v.operator }

// scope is what v may see of the registry of tools.
func (v view) scope() discovery.Scope {
	return discovery.Scope{MayCall: v.mayCall, AllProblems: v.allCallers()}
}

// dashboard is what v may see of the dashboard.
func (v view) dashboard() dashboard.View {
	return dashboard.View{Caller: v.caller, AllCallers: v.allCallers(), MayCall: v.mayCall}
}
