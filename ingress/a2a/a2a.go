package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/webhook"
	"github.com/toolbus/toolbus/schema"
)

// Path is where the ingress mounts the JSON-RPC binding; CardPath is where
// A2A clients find the public agent card.
const (
	Path     = "/a2a"
	CardPath = a2asrv.WellKnownAgentCardPath
)

// Defaults of [New].
const (
	// DefaultMaxBodyBytes bounds one request's body.
	DefaultMaxBodyBytes int64 = 4 << 20
	// DefaultMaxDepth bounds the nesting of arrays and objects in one
	// request's body.
	DefaultMaxDepth = 64
	// DefaultWait bounds a blocking message/send when the ingress names
	// no deadline for the call.
	DefaultWait = 30 * time.Second
)

// request is what the ingress read from one HTTP request ([door.Request])
// and what the front door read of it for the SDK's handler, which
// receives only a context and the params.
type request struct {
	door.Request

	// endpoint is the URL of the JSON-RPC binding as the client reached
	// it, for the extended card.
	endpoint string
	// message is the message of a message/send or message/stream as the
	// client wrote it, and parts the raw data of each of its data parts
	// (nil for other parts): the SDK reads numbers as float64, and a job's
	// params and history keep every digit.
	message json.RawMessage
	parts   []json.RawMessage
	// field, when the handler sets it, names the member of the params
	// (a JSON pointer) that a -32602 refusal of a message/send is about,
	// for the answer's data.field, which the SDK cannot carry.
	field *string
}

// Option configures [New].
type Option func(*Server) error

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) error {
		if l == nil {
			return errors.New("a2a: nil logger")
		}
		s.log = l
		return nil
	}
}

// WithMaxBodyBytes bounds the body of one request (default
// [DefaultMaxBodyBytes]); a longer one is refused, naming the limit
// max_body_bytes, before the SDK reads any of it.
func WithMaxBodyBytes(n int64) Option {
	return func(s *Server) error {
		if n <= 0 {
			return fmt.Errorf("a2a: max body bytes must be positive, got %d", n)
		}
		s.maxBody = n
		return nil
	}
}

// WithMaxDepth bounds the nesting of arrays and objects in the body of
// one request, counting the request object (default [DefaultMaxDepth]);
// a deeper one is refused, naming the limit max_depth, before the SDK
// decodes it, as POST /rpc refuses it ([schema.CheckDepth]).
func WithMaxDepth(n int) Option {
	return func(s *Server) error {
		if n <= 0 {
			return fmt.Errorf("a2a: max depth must be positive, got %d", n)
		}
		s.maxDepth = n
		return nil
	}
}

// Schemes says how the ingress authenticates its callers, for the
// security schemes of the agent card.
type Schemes struct {
	// APIKeyHeader names the header that carries an API key, which is
	// also accepted as a bearer token; empty when there are no API keys.
	APIKeyHeader string
	// JWT: bearer JSON Web Tokens.
	JWT bool
}

// WithAuthentication says that the ingress authenticates its callers as
// schemes says (default: it does not, and every request is the one
// anonymous caller's). The public card then names those security
// schemes and lists only the skills of [WithPublicSkills]; the
// authenticated extended card lists the skills its caller may call.
func WithAuthentication(schemes Schemes) Option {
	return func(s *Server) error {
		if schemes.APIKeyHeader == "" && !schemes.JWT {
			return errors.New("a2a: authentication needs API keys or JWT")
		}
		s.auth = &schemes
		return nil
	}
}

// WithPublicSkills lists, by method patterns (such as "echo" or
// "math.*"), the skills the public agent card shows while authentication
// is on (default none). Without authentication the public card lists
// every skill.
func WithPublicSkills(patterns ...string) Option {
	return func(s *Server) error {
		for _, p := range patterns {
			if err := schema.ValidatePattern(p); err != nil {
				return fmt.Errorf("a2a: public skill pattern %q: %w", p, err)
			}
		}
		s.public = append(s.public, patterns...)
		return nil
	}
}

// WithTextMethod names the method a message of text alone goes to, with
// params {"text": "..."} (default none: such a message is refused with an
// error that says how to pick a skill).
func WithTextMethod(method string) Option {
	return func(s *Server) error {
		if err := schema.ValidateMethod(method); err != nil || schema.IsReserved(method) {
			return fmt.Errorf("a2a: text method %q is not a method a worker can serve", method)
		}
		s.textMethod = method
		return nil
	}
}

// WithName sets the name of the agent card (default "toolbus"), such as
// the cluster's.
func WithName(name string) Option {
	return func(s *Server) error {
		if name == "" {
			return errors.New("a2a: empty agent name")
		}
		s.name = name
		return nil
	}
}

// WithPush turns push notifications on: their configs are kept in p (a
// JetStream bucket, see [PushStore]), and the task is POSTed to each
// config's URL on every state change through guard, which refuses
// loopback, private and link-local receivers that the operator did not
// allow. Default: push notifications are not supported.
func WithPush(p *PushStore, guard *egress.Guard) Option {
	return func(s *Server) error {
		if p == nil || guard == nil {
			return errors.New("a2a: push notifications need a store and an egress guard")
		}
		s.push = p
		s.guard = guard
		return nil
	}
}

// Server is the A2A front door. Make it with [New]; stop it with
// [Server.Close]. It is safe for concurrent use.
type Server struct {
	ing door.Ingress
	reg *discovery.Registry // nil: skills are not listed nor checked

	log        *slog.Logger
	maxBody    int64
	maxDepth   int
	auth       *Schemes
	public     []string
	textMethod string
	name       string
	push       *PushStore
	pushCaps   pushCaps
	guard      *egress.Guard
	sender     *webhook.Sender

	rpc http.Handler
	ids atomic.Uint64

	// quit ends streams and push followers at Close; wg counts the
	// followers, which start only while closed is false.
	quit      chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
	wg        sync.WaitGroup
}

var (
	_ a2asrv.RequestHandler = (*Server)(nil)
	_ http.Handler          = (*Server)(nil)
)

// New returns the front door of ing over the tools of reg (nil: the card
// lists no skills and a message's skill is not checked before its job is
// submitted).
func New(ing door.Ingress, reg *discovery.Registry, opts ...Option) (*Server, error) {
	if ing == nil {
		return nil, errors.New("a2a: nil ingress")
	}
	s := &Server{ing: ing, reg: reg, log: slog.Default(), maxBody: DefaultMaxBodyBytes, maxDepth: DefaultMaxDepth, name: "toolbus", quit: make(chan struct{})}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.log = s.log.With("transport", "a2a")
	s.rpc = a2asrv.NewJSONRPCHandler(s)
	if s.guard != nil {
		var err error
		if s.sender, err = newPushSender(s.guard); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Close ends the streams in progress (their clients can resubscribe on
// another replica) and stops following tasks for push notifications. A
// nil Server, and one closed already, is left as it is.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.quit)
		s.wg.Wait()
		s.sender.Close()
	})
}

// requestKey is the context key of the [request] of an A2A call. The
// SDK's request handler receives only a context and the params, so what
// the ingress read from the HTTP request travels to it this way.
type requestKey struct{}

// ServeHTTP answers the agent card at [CardPath] and A2A's JSON-RPC
// binding at any other path it is mounted on (see envelope.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == CardPath {
		s.serveCard(w, r)
		return
	}
	s.serveRPC(w, r)
}

// rawParts returns the raw data of the data parts of a message as the
// client wrote it (nil for other parts).
func rawParts(message json.RawMessage) []json.RawMessage {
	var m struct {
		Parts []struct {
			Kind string          `json:"kind"`
			Data json.RawMessage `json:"data"`
		} `json:"parts"`
	}
	if json.Unmarshal(message, &m) != nil {
		return nil
	}
	out := make([]json.RawMessage, len(m.Parts))
	for i, p := range m.Parts {
		if p.Kind == "data" {
			out[i] = p.Data
		}
	}
	return out
}

// rawData returns the members of data part i as the client sent them, or
// false when they are not known.
func (r request) rawData(i int) (map[string]json.RawMessage, bool) {
	if i >= len(r.parts) || r.parts[i] == nil {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(r.parts[i], &m) != nil {
		return nil, false
	}
	return m, true
}

// requestOf returns the [request] of the A2A call whose context is ctx.
func requestOf(ctx context.Context) (request, error) {
	r, ok := ctx.Value(requestKey{}).(request)
	if !ok || r.Call == nil || r.Subscribe == nil {
		return request{}, refuse(a2a.ErrInternalError, "the call reached the handler without its request")
	}
	return r, nil
}

// mayCall reports whether r's caller may call name.
func (r request) mayCall(name string) bool { return r.MayCall != nil && r.MayCall(name) }

// timeout returns how long a call of method may wait under r.
func (r request) timeout(method string) time.Duration {
	if r.Timeout != nil {
		if d := r.Timeout(method); d > 0 {
			return d
		}
	}
	return DefaultWait
}

// call runs one rpc.jobs.* call under r and decodes its result into v.
func (s *Server) call(ctx context.Context, r request, method string, params any, v any) *schema.Error {
	p, err := json.Marshal(params)
	if err != nil {
		return schema.NewError(schema.CodeInternal, "internal error: encode params: "+err.Error(), nil)
	}
	id := json.RawMessage(strconv.Quote("a2a-" + strconv.FormatUint(s.ids.Add(1), 10)))
	resp := r.Call(ctx, schema.Request{ID: id, Method: method, Params: p})
	if resp.Error != nil {
		return resp.Error
	}
	if err := json.Unmarshal(resp.Result, v); err != nil {
		return schema.NewError(schema.CodeInternal, "internal error: "+method+" answered what toolbus cannot read", nil)
	}
	return nil
}
