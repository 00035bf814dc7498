package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/schema"
)

// element is one element of a message as the ingress sees it: a request to
// run, or the error it is answered with, and the form of its answer.
type element struct {
	req schema.Request
	err *schema.Error // the answer, when the element is not a valid request
	v1  bool          // answered in JSON-RPC 1.0 form
}

// response is one answer to write, in the form its request asked for (a
// JSON-RPC 2.0 response, or 1.0 with [WithJSONRPC1]); "reply" is what a
// worker sends on the bus.
type response struct {
	schema.Response
	v1 bool
}

// parse parses a JSON-RPC message under the server's limits. A non-nil
// error is the whole message's answer, sent alone with a null id in 2.0
// form. With [WithJSONRPC1], elements without a "jsonrpc" member are read
// as JSON-RPC 1.0 requests. A large batch is parsed in steps
// ([schema.ParseSteps]) that each yield ([Server.yield]), as its plan is.
func (s *Server) parse(body []byte) (elems []element, batch bool, err *schema.Error) {
	items, batch, err := schema.ParseSteps(body, s.limit, s.step)
	if err != nil {
		return nil, batch, err
	}
	elems = make([]element, len(items))
	for i, it := range items {
		elems[i] = element{req: it.Request, err: it.Err}
	}
	if s.cfg.jsonrpc1 {
		readV1(body, batch, elems)
	}
	return elems, batch, nil
}

// localMethod is a method a transport answers itself instead of handing it
// to the dispatcher, such as rpc.cancel and rpc.jobs.subscribe on a
// WebSocket connection. It is given the call as the dispatcher would be,
// caller included.
type localMethod struct {
	serve func(c schema.Call) (json.RawMessage, *schema.Error)
	// own marks a method that acts only on the connection's own calls in
	// flight, which admission has let through already (rpc.cancel). It is
	// answered before admission, so that a caller can always stop its own
	// work; every other local method is admitted like any call.
	own bool
}

// plan is what the ingress does with one message: the answers it has
// already, and the calls it hands to the dispatcher.
type plan struct {
	// out holds the answers in request order; the slot of a dispatched
	// call is filled when the call is answered.
	out   []response
	calls []schema.Call
	// slots holds, per call, its index in out, or -1 for a notification.
	slots []int
	// charge holds the bytes of the answers in out against the caller's
	// budget until the transport has written them and calls done.
	charge *quota.Charge
}

// done gives back the bytes p's answers hold: they are written, or will
// never be.
func (p *plan) done() { p.charge.Close() }

// plan sorts the elements of a message: invalid elements and methods that
// can never be routed are answered at once, methods in local are run at
// once (after admission, but for a connection's own methods), and every
// other element, notifications included, becomes a call carrying its
// deadline: the one the declared policy gives it ([WithDeadline]), or the
// one the client asked for. This is the one place where every
// transport's requests are checked.
func (s *Server) plan(elems []element, hdr callHeaders, local map[string]localMethod) plan {
	p := plan{out: make([]response, 0, len(elems)), charge: s.bytes.Open(callerName(hdr.caller))}
	for k, el := range elems {
		if k%yieldEvery == yieldEvery-1 {
			// A large batch is planned in short steps: another
			// caller's request, read meanwhile, runs in between.
			s.yield()
		}
		if el.err != nil {
			// An element whose id could not be read is answered with a
			// null id, as the specification asks.
			p.out = append(p.out, response{schema.Response{ID: el.req.ID, Error: el.err}, el.v1})
			continue
		}
		req := el.req
		call := schema.Call{Request: req, Timeout: hdr.timeout, Async: hdr.async, Caller: callerName(hdr.caller)}
		m, isLocal := local[req.Method]
		if isLocal && m.own {
			result, err := m.serve(call)
			if !req.IsNotification() {
				p.out = append(p.out, response{schema.Response{ID: req.ID, Result: result, Error: err}, el.v1})
			}
			continue
		}
		if e := s.checkMethod(req.Method); e != nil {
			e = s.refused(hdr.trace, call.Caller, &req, e)
			if !req.IsNotification() {
				p.out = append(p.out, response{schema.Response{ID: req.ID, Error: e}, el.v1})
			}
			continue
		}
		if e := s.admit(hdr.caller, &req); e != nil {
			e = s.refused(hdr.trace, call.Caller, &req, e)
			if !req.IsNotification() {
				p.out = append(p.out, response{schema.Response{ID: req.ID, Error: e}, el.v1})
			}
			continue
		}
		if isLocal {
			result, err := m.serve(call)
			if !req.IsNotification() {
				p.out = append(p.out, response{schema.Response{ID: req.ID, Result: result, Error: err}, el.v1})
			}
			continue
		}
		call.Timeout = s.settleDeadline(req.Method, hdr.timeout)
		slot := -1
		if !req.IsNotification() {
			slot = len(p.out)
			p.out = append(p.out, response{schema.Response{ID: req.ID}, el.v1})
		}
		if p.calls == nil {
			p.calls = make([]schema.Call, 0, len(elems))
			p.slots = make([]int, 0, len(elems))
		}
		p.calls = append(p.calls, call)
		p.slots = append(p.slots, slot)
	}
	schema.SetIdempotencyKey(p.calls, hdr.idemKey)
	return p
}

// answers counts the calls of p that are not notifications.
func (p *plan) answers() int {
	n := 0
	for _, slot := range p.slots {
		if slot >= 0 {
			n++
		}
	}
	return n
}

// settle returns the answer to send for call c, given what the dispatcher
// returned: the call's own id, an error in preference to a result (an error
// is never swallowed, even next to a result), and an internal error when
// there is neither. The answer is held against ch until it is written;
// one that does not fit is replaced by the refusal that says so.
func (s *Server) settle(ctx context.Context, c *schema.Call, r schema.Response, ch *quota.Charge) schema.Response {
	out := schema.Response{ID: c.ID}
	switch {
	case r.Error != nil:
		out.Error = r.Error
	case len(r.Result) > 0:
		out.Result = r.Result
	default:
		s.log.LogAttrs(ctx, slog.LevelError, "dispatcher returned neither result nor error",
			slog.String("id", string(c.ID)), slog.String("method", c.Method))
		out.Error = internalError()
	}
	held := ch.Hold(out)
	if held.Error != out.Error {
		s.countRefusal(limitOf(held.Error))
	}
	return held
}

// dispatch runs the calls of p and settles each answer into its slot as
// it arrives, so that it is held against p's charge from then on. Every
// call gets an answer (see [Server.stream]).
func (s *Server) dispatch(ctx context.Context, p *plan) {
	s.stream(ctx, p.calls, p.charge, func(i int, r schema.Response) {
		if slot := p.slots[i]; slot >= 0 {
			p.out[slot].Response = r
		}
	})
}

// stream runs calls on the server's chain and hands emit the settled
// answer of every call that is not a notification, exactly once each, in
// completion order, held against ch (see [Server.settle]). Whatever the
// chain does wrong (panicking, skipping a call, answering one twice,
// emitting late) stays inside: a call it never answered gets -32603 when
// the chain returns, and emit is never called after stream returns. emit
// is called from one goroutine at a time and must not block for long.
func (s *Server) stream(ctx context.Context, calls []schema.Call, ch *quota.Charge, emit func(i int, r schema.Response)) {
	if len(calls) == 0 {
		return
	}
	answers := schema.NewAnswers(calls)
	if err := s.streamSafely(ctx, calls, func(i int, r schema.Response) {
		answers.Answer(i, func(first bool) {
			if !first {
				s.log.LogAttrs(ctx, slog.LevelError, "dispatcher emitted an unexpected answer", slog.Int("index", i))
				return
			}
			emit(i, s.settle(ctx, &calls[i], r, ch))
		})
	}); err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "dispatch failed", slog.String("error", err.Error()))
	}
	answers.Close(func(i int) {
		if calls[i].IsNotification() {
			return
		}
		s.log.LogAttrs(ctx, slog.LevelError, "dispatcher left a call unanswered",
			slog.String("id", string(calls[i].ID)), slog.String("method", calls[i].Method))
		emit(i, schema.Response{ID: calls[i].ID, Error: internalError()})
	})
}

func (s *Server) streamSafely(ctx context.Context, calls []schema.Call, emit func(int, schema.Response)) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = s.recovered(ctx, v)
		}
	}()
	s.dispatcher.Dispatch(ctx, calls, emit)
	return nil
}

// recovered logs a dispatcher panic and returns it as an error; the
// sentinel with which net/http aborts a handler keeps unwinding.
func (s *Server) recovered(ctx context.Context, v any) error {
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.log.LogAttrs(ctx, slog.LevelError, "dispatcher panicked",
		slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
	return fmt.Errorf("dispatcher panicked: %v", v)
}

// internalError is the answer for a call that got no usable answer. The
// detail goes to the log; the client learns only that toolbus failed.
func internalError() *schema.Error {
	return schema.NewError(schema.CodeInternal, "internal error: the call got no answer",
		map[string]any{"reason": schema.ReasonNoAnswer})
}

// checkMethod returns the error for a method the ingress never dispatches:
// a name outside the bus grammar, or a reserved rpc.* name that the
// transport does not serve itself.
func (s *Server) checkMethod(method string) *schema.Error {
	if err := schema.ValidateMethod(method); err != nil {
		return schema.ErrorFrom(err)
	}
	if schema.IsReserved(method) && s.router.extension(method) == nil {
		return schema.NewError(schema.CodeMethodNotFound, "method not found: "+method+" is reserved",
			map[string]any{"reason": schema.ReasonReserved, "method": method})
	}
	return nil
}

// yieldEvery is how many elements of a batch the ingress plans, or
// answers, before it lets other goroutines run: on a busy core, one
// caller's batch of 500 otherwise runs to its end before anyone else.
const yieldEvery = 32

// appendResponse appends the JSON form of r to b.
func appendResponse(b []byte, r response) ([]byte, error) {
	if r.v1 {
		return appendV1(b, r.Response)
	}
	return r.AppendJSON(b)
}

// appendResponses appends one answer, or the array of a batch's answers,
// calling yield between steps of a large batch.
func appendResponses(b []byte, rs []response, batch bool, yield func()) ([]byte, error) {
	if !batch {
		return appendResponse(b, rs[0])
	}
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		if i%yieldEvery == yieldEvery-1 {
			yield() // as in plan: a large batch in short steps
		}
		var err error
		if b, err = appendResponse(b, r); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// admit decides, for one call of a message, whether it goes to the
// dispatcher: its caller must be allowed the method (-32005 otherwise), its
// answers waiting to be written must be under its byte budget, and its
// caller's token bucket must hold a token (-32002 otherwise). A call
// refused here is answered for its own id alone; the rest of its batch goes
// on. The in-flight caps, global, per caller and per method, are the
// aggregator's.
func (s *Server) admit(p *auth.Principal, req *schema.Request) *schema.Error {
	if e := s.authorize(p, req); e != nil {
		return e
	}
	if e := s.bytes.Admit(callerName(p)); e != nil {
		return e
	}
	return s.limiter.Admit(callerName(p))
}

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

// callerName returns the name of the caller p, or "" for nil: every caller
// of an ingress without [WithAuth].
func callerName(p *auth.Principal) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// Deadline is a deadline policy: the deadline a call of method gets when
// its client asked for requested (zero: nothing asked), such as the
// smallest of the request, the method's timeout and the server maximum
// (DESIGN.md, "Deadlines"). It must be a bound: asked again with a
// deadline it gave, it gives the same, so that the layers behind the
// ingress may apply it to a call whose deadline is settled already.
type Deadline func(method string, requested time.Duration) time.Duration

// defaultDeadline bounds a call the ingress itself must put a deadline on
// (a body waiting for its turn, a call waiting in its caller's queue, an
// extension call) when no policy is declared and the client asked for
// none, or for more.
const defaultDeadline = 30 * time.Second

// WithDeadline declares the deadline policy of the ingress's calls. The
// ingress settles each call's deadline with it once, when it plans the
// call (after the timeout a tool announces, with [WithRegistry]), and
// hands it down the chain in [schema.Call.Timeout]: the fairness layer
// queues the call under it, extensions run under it, and the dispatcher
// at the end gets it as the deadline asked for. The A2A front door waits
// for a task as long as the policy says. A gateway made by package node
// declares its aggregator's ([aggregator.Aggregator.Timeout]). Without a
// policy a call carries the client's wish as it came (zero when none),
// and where the ingress needs a deadline of its own it takes that wish,
// at most 30 seconds.
func WithDeadline(p Deadline) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("ingress: nil deadline policy")
		}
		c.deadline = p
		return nil
	}
}

// policy is the deadline the declared policy gives a call of method
// whose client asked for requested; requested itself without a policy.
func (s *Server) policy(method string, requested time.Duration) time.Duration {
	if s.cfg.deadline == nil {
		return requested
	}
	return s.cfg.deadline(method, requested)
}

// settleDeadline is the deadline a call of method carries down the chain
// when its client asked for requested: with [WithRegistry], the tool's
// own timeout as its workers announce it bounds the request (as the
// discovery layer does behind the fairness layer, so that a call's wait
// in its queue counts too), and then the policy applies.
func (s *Server) settleDeadline(method string, requested time.Duration) time.Duration {
	if s.cfg.registry != nil && !schema.IsReserved(method) {
		if t, ok := s.cfg.registry.Lookup(method); ok {
			if d := time.Duration(t.TimeoutMS) * time.Millisecond; d > 0 && (requested <= 0 || d < requested) {
				requested = d
			}
		}
	}
	return s.policy(method, requested)
}

// deadline is the deadline the ingress itself puts on a call of method
// (or a body, method "") that carries timeout: the declared policy's,
// which keeps a settled deadline as it is; without a policy, timeout
// when there is one under [defaultDeadline], else defaultDeadline.
func (s *Server) deadline(method string, timeout time.Duration) time.Duration {
	if s.cfg.deadline != nil {
		return s.cfg.deadline(method, timeout)
	}
	if timeout > 0 && timeout < defaultDeadline {
		return timeout
	}
	return defaultDeadline
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
	for i := range calls {
		c := &calls[i]
		if r.extension(c.Method) != nil ||
			c.Async && !c.IsNotification() && r.promoter != nil && r.promoter.Promotable(ctx, c.Method) {
			local = append(local, i)
		}
	}
	if len(local) == 0 {
		next.Dispatch(ctx, calls, emit)
		return
	}
	// Only now, and only when some calls run here, are the others copied
	// into a set of their own.
	rest := schema.Subset{Calls: make([]schema.Call, 0, len(calls)-len(local))}
	for i, k := 0, 0; i < len(calls); i++ {
		if k < len(local) && local[k] == i {
			k++
			continue
		}
		rest.Add(i, calls[i])
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
