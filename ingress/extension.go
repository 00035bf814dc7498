package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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

// router is the chain's extension layer: it sends extension methods and
// promoted calls to their extension and the rest to the next dispatcher.
type router struct {
	extensions map[string]Extension
	promoter   Promoter
	// deadline is the deadline of an extension or promoted call that
	// carries timeout ([Server.deadline]).
	deadline func(method string, timeout time.Duration) time.Duration
}

func newRouter(extensions map[string]Extension, deadline func(string, time.Duration) time.Duration) *router {
	if len(extensions) == 0 {
		return nil
	}
	r := &router{extensions: extensions, deadline: deadline}
	for _, ext := range extensions {
		if p, ok := ext.(Promoter); ok {
			r.promoter = p
		}
	}
	return r
}

// layer returns the extension layer of the chain, or nil when r is nil
// (no extension is configured).
func (r *router) layer() schema.Layer {
	if r == nil {
		return nil
	}
	return func(next schema.Dispatcher) schema.Dispatcher {
		return schema.DispatcherFunc(func(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
			r.dispatch(ctx, next, calls, emit)
		})
	}
}

// extension returns the extension serving method, or nil.
func (r *router) extension(method string) Extension {
	if r == nil {
		return nil
	}
	for prefix, ext := range r.extensions {
		if strings.HasPrefix(method, prefix) {
			return ext
		}
	}
	return nil
}

// dispatch sends the calls for next to it as one set; every other call
// runs on a goroutine of its own. emit is called from one goroutine at a
// time.
func (r *router) dispatch(ctx context.Context, next schema.Dispatcher, calls []schema.Call, emit func(i int, resp schema.Response)) {
	var local []int
	var rest schema.Subset
	for i := range calls {
		c := &calls[i]
		switch {
		case r.extension(c.Method) != nil:
			local = append(local, i)
		case c.Async && !c.IsNotification() && r.promoter != nil && r.promoter.Promotable(ctx, c.Method):
			local = append(local, i)
		default:
			rest.Add(i, *c)
		}
	}
	if len(local) == 0 {
		next.Dispatch(ctx, calls, emit)
		return
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, i := range local {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := r.serveLocal(ctx, &calls[i], r.deadline(calls[i].Method, calls[i].Timeout))
			if calls[i].IsNotification() {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			emit(i, resp)
		}()
	}
	rest.Dispatch(ctx, next, func(i int, resp schema.Response) {
		mu.Lock()
		defer mu.Unlock()
		emit(i, resp)
	})
	wg.Wait()
}

func (r *router) serveLocal(ctx context.Context, c *schema.Call, timeout time.Duration) schema.Response {
	var result json.RawMessage
	var err *schema.Error
	if ext := r.extension(c.Method); ext != nil {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		result, err = ext.ServeRPC(ctx, *c)
	} else {
		result, err = r.promoter.RunAsJob(ctx, *c, timeout)
	}
	return schema.Response{ID: c.ID, Result: result, Error: err}
}
