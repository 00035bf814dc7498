package ingress

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/discovery"
)

// WithRegistry turns on what a registry of the workers' announcements makes
// possible (default off): params are validated against the advertised
// schemas before any worker runs (see [WithValidation]); a tool's
// advertised timeout bounds its calls' deadlines; a call of a method the
// registry has seen advertised but that no worker serves now is answered
// -32003 (retryable) instead of -32601; rpc.discover and GET /openrpc.json
// answer the OpenRPC document of the live tools; and /mcp serves them to
// MCP clients (package ingress/mcp). With [WithAuth] the document and
// MCP's tools/list hold the tools the caller may call, and the problems of
// those (every problem for an operator). The caller starts and closes reg.
func WithRegistry(reg *discovery.Registry) Option {
	return func(c *config) error {
		if reg == nil {
			return errors.New("ingress: nil registry")
		}
		for p := range c.extensions {
			if strings.HasPrefix(discovery.Method, p) || strings.HasPrefix(p, discovery.Method) {
				return fmt.Errorf("ingress: extension prefix %q overlaps %s", p, discovery.Method)
			}
		}
		if c.extensions == nil {
			c.extensions = map[string]Extension{}
		}
		// The router matches extensions by prefix; the discoverer answers
		// only rpc.discover itself and -32601 for any longer name. [New]
		// gives it the scope of each caller, once every option is read.
		c.extensions[discovery.Method] = discovery.Discoverer{Registry: reg}
		c.registry = reg
		return nil
	}
}

// WithValidation turns the checking of params against the registry's
// schemas on or off (default on; it needs [WithRegistry]). Params that do
// not fit are answered -32602 with data {"field": JSON pointer, "reason",
// "method", "source": "schema"} and never reach a worker.
func WithValidation(on bool) Option {
	return func(c *config) error {
		c.noValidate = !on
		return nil
	}
}

// discoverer returns the extension that answers rpc.discover, and serves
// GET /openrpc.json, with what the caller of each request may see.
func (s *Server) discoverer() discovery.Discoverer {
	return discovery.Discoverer{Registry: s.cfg.registry, Scope: func(ctx context.Context) discovery.Scope {
		return s.requestView(ctx).scope()
	}}
}
