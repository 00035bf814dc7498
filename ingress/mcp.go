package ingress

import (
	"fmt"

	"github.com/toolbus/toolbus/ingress/mcp"
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
// tools/call comes back through [seam].
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
	return mcp.New(seam{s}, s.cfg.registry, opts...)
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
