package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Extension answers a family of the ingress's own rpc.* methods, such as
// rpc.jobs.*, on every transport. The jobs service implements it.
type Extension interface {
	// ServeRPC answers one call of the family; call.Caller says who asks.
	ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error)
}

// Promoter is an [Extension] that can run a tool call as a job, for clients
// that send Prefer: respond-async.
type Promoter interface {
	// Promotable reports whether method can run as a job.
	Promotable(ctx context.Context, method string) bool
	// RunAsJob runs call as a job and waits for it at most timeout; past
	// that, the answer is a timeout whose data names the job.
	RunAsJob(ctx context.Context, call schema.Call, timeout time.Duration) (json.RawMessage, *schema.Error)
}

// WithExtension routes every method starting with prefix (which must start
// with "rpc." and end with ".") to ext instead of the dispatcher. When ext
// is also a [Promoter], calls of job-capable tools sent with Prefer:
// respond-async run through it as jobs.
func WithExtension(prefix string, ext Extension) Option {
	return func(c *config) error {
		if ext == nil {
			return fmt.Errorf("ingress: nil extension for %q", prefix)
		}
		if !strings.HasPrefix(prefix, schema.ReservedPrefix) || !strings.HasSuffix(prefix, ".") || len(prefix) <= len(schema.ReservedPrefix)+1 {
			return fmt.Errorf("ingress: extension prefix %q must be rpc. and a name and end with a dot, like %q", prefix, "rpc.name.")
		}
		if err := schema.ValidateMethod(strings.TrimSuffix(prefix, ".")); err != nil {
			return fmt.Errorf("ingress: extension prefix %q: %w", prefix, err)
		}
		for p := range c.extensions {
			if strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p) {
				return fmt.Errorf("ingress: extension prefix %q overlaps %q", prefix, p)
			}
		}
		if c.extensions == nil {
			c.extensions = map[string]Extension{}
		}
		c.extensions[prefix] = ext
		return nil
	}
}
