package ingress

import (
	"context"
	"fmt"
	"net/http"

	"github.com/toolbus/toolbus/ingress/mcp"
	"github.com/toolbus/toolbus/schema"
)

// WithOrigin names the cluster the ingress belongs to (see
// [github.com/toolbus/toolbus/bus.Origin]);
// the MCP front door marks every tool it lists with it, under _meta
// "toolbus/origin", so that an MCP bridge of the same cluster pointed at
// it imports none of them. Default none: the tools are not marked.
func WithOrigin(origin string) Option {
	return func(c *config) error {
		c.mcpOrigin = origin
		return nil
	}
}

// WithMCPStateKey sets the key, of at least
// [mcp.MinRequestStateKeyBytes] bytes, that signs the request state of an
// MCP tools/call answered with a question at the revisions without
// sessions (2026-07-28 and later); the client's retry, with its answer,
// resumes the job on any ingress whose key is the same. Default: a random
// key of this process, so that only this ingress resumes it.
func WithMCPStateKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < mcp.MinRequestStateKeyBytes {
			return fmt.Errorf("ingress: the MCP state key must be at least %d bytes, got %d", mcp.MinRequestStateKeyBytes, len(key))
		}
		c.mcpStateKey = append([]byte(nil), key...)
		return nil
	}
}

// newMCP returns the MCP front door over the registry's tools, whose
// tools/call comes back through [mcpSeam].
func (s *Server) newMCP() (*mcp.Server, error) {
	opts := []mcp.Option{mcp.WithLogger(s.log), mcp.WithMaxBodyBytes(s.cfg.limits.MaxBodyBytes), mcp.WithMaxDepth(s.cfg.limits.MaxDepth)}
	if s.auth != nil {
		opts = append(opts, mcp.WithAuthentication())
	}
	if prefix, j := s.router.jobs(); j != nil {
		opts = append(opts, mcp.WithJobs(prefix, j))
	}
	if s.cfg.mcpOrigin != "" {
		opts = append(opts, mcp.WithOrigin(s.cfg.mcpOrigin))
	}
	if s.cfg.mcpStateKey != nil {
		opts = append(opts, mcp.WithRequestStateKey(s.cfg.mcpStateKey))
	}
	return mcp.New(mcpSeam{s}, s.cfg.registry, opts...)
}

// jobs returns the extension that both promotes calls to jobs and streams
// their records, and its prefix, or nil.
func (r *router) jobs() (string, mcp.Jobs) {
	if r == nil || r.promoter == nil {
		return "", nil
	}
	for prefix, ext := range r.extensions {
		if j, ok := ext.(mcp.Jobs); ok && any(ext) == any(r.promoter) {
			return prefix, j
		}
	}
	return "", nil
}

// mcpSeam is the one seam between the ingress and its MCP front door:
// what a request's headers ask, who sent it, and a way to run its calls.
type mcpSeam struct{ s *Server }

var _ mcp.Ingress = mcpSeam{}

// Request implements [mcp.Ingress]: the caller the authentication
// middleware found, what it may call, and the request's call headers.
func (m mcpSeam) Request(r *http.Request) (mcp.Request, *schema.Error) {
	hdr, err := m.s.callHeaders(r)
	return mcp.Request{
		Caller:  hdr.caller.String(),
		MayCall: m.s.view(hdr.caller).mayCall,
		Call: func(ctx context.Context, req schema.Request) schema.Response {
			return m.s.call(ctx, hdr, req)
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
