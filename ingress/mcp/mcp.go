package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/schema"
)

// Path is where the ingress mounts the front door (Streamable HTTP).
const Path = "/mcp"

// DefaultMaxDepth bounds the nesting of arrays and objects in one
// request's body (see [WithMaxDepth]).
const DefaultMaxDepth = 64

// refHeader carries, from the HTTP request that brought an MCP message to
// the tool handler that runs it, a reference to what the ingress read from
// that request (deadline, caller). A client's own value of it is always
// replaced.
const refHeader = "Toolbus-Mcp-Ref"

// metaWrapped is the _meta member of a tool result whose structured
// content wraps a value that is not an object (see [success]).
const metaWrapped = "toolbus/wrapped"

// Jobs is what the front door needs of the jobs extension to run, as a
// durable job, a tools/call that asks for progress. The jobs service is
// one.
type Jobs interface {
	// Promotable reports whether method can run as a job.
	Promotable(ctx context.Context, method string) bool
	// Subscribe answers the subscribe call of call.Caller with the job's
	// record and returns stream, which calls notify for every
	// notification until the job is over or ctx ends.
	Subscribe(ctx context.Context, call schema.Call) (result json.RawMessage, stream func(ctx context.Context, notify func(method string, params json.RawMessage)), err *schema.Error)
	// HoldSubscription counts a subscription of caller before the job it
	// will follow is submitted, or returns the refusal a subscription
	// would get, so that a caller at its bound is refused before its job
	// exists; release gives it back, once.
	HoldSubscription(caller string) (release func(), err *schema.Error)
	// SubscribeHeld is Subscribe for a subscription held already, which
	// release gives back when the subscription ends or is refused.
	SubscribeHeld(ctx context.Context, call schema.Call, release func()) (result json.RawMessage, stream func(ctx context.Context, notify func(method string, params json.RawMessage)), err *schema.Error)
}

// Option configures [New].
type Option func(*Server) error

// WithLogger sets the logger of the MCP server (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) error {
		if l == nil {
			return errors.New("mcp: nil logger")
		}
		s.log = l
		return nil
	}
}

// WithMaxBodyBytes bounds the body of one request (default: the SDK's,
// mcp.DefaultMaxRequestBodyBytes); a longer one is answered 413 with a
// -32006 error naming max_body_bytes, before the SDK reads any of it.
func WithMaxBodyBytes(n int64) Option {
	return func(s *Server) error {
		if n <= 0 {
			return fmt.Errorf("mcp: max body bytes must be positive, got %d", n)
		}
		s.maxBody = n
		return nil
	}
}

// WithMaxDepth bounds the nesting of arrays and objects in the body of
// one request, counting the message itself (default [DefaultMaxDepth]);
// a deeper one is answered 400 with the -32006 error POST /rpc answers
// it with ([schema.CheckDepth]), naming max_depth, before the SDK
// decodes it.
func WithMaxDepth(n int) Option {
	return func(s *Server) error {
		if n <= 0 {
			return fmt.Errorf("mcp: max depth must be positive, got %d", n)
		}
		s.maxDepth = n
		return nil
	}
}

// WithAuthentication says that the ingress authenticates its callers
// (default: it does not, and every request is the one anonymous caller's).
// Each session then belongs to the caller that made it, a request of
// another caller under its id is answered 403, and each caller is shown,
// and may call, the tools of [door.Request.MayCall] alone.
func WithAuthentication() Option {
	return func(s *Server) error {
		s.authenticated = true
		return nil
	}
}

// WithJobs lets a tools/call that asks for progress run as a job of j,
// whose methods start with prefix (such as "rpc.jobs."): submitted with
// prefix+"submit" through the ingress, followed with j's subscription, and
// read again with prefix+"get" when the subscription ends early.
func WithJobs(prefix string, j Jobs) Option {
	return func(s *Server) error {
		if j == nil || prefix == "" {
			return errors.New("mcp: jobs need an extension and its prefix")
		}
		s.jobs, s.jobsPrefix = j, prefix
		return nil
	}
}

// WithRequestStateKey sets the key that signs the request state of a
// tools/call answered with a question at the newest MCP revision, which
// the client sends back with its answer (see [Server]); it must be at
// least [MinRequestStateKeyBytes] bytes. Default: a random key of this
// process, so that only this process resumes the job. Replicas behind one
// address share one key, so that a client's retry resumes the job on
// whichever replica it reaches.
func WithRequestStateKey(key []byte) Option {
	return func(s *Server) error {
		if len(key) < MinRequestStateKeyBytes {
			return fmt.Errorf("mcp: the request state key must be at least %d bytes, got %d", MinRequestStateKeyBytes, len(key))
		}
		s.states = stateSigner{key: append([]byte(nil), key...)}
		return nil
	}
}

// MetaOrigin is the _meta member of every listed tool that names the
// cluster it comes from (see [WithOrigin]).
const MetaOrigin = "toolbus/origin"

// WithOrigin marks every listed tool with origin, the name of the cluster
// the front door belongs to, under _meta [MetaOrigin] (default: tools are
// not marked). The MCP bridge refuses the tools of its own cluster by it.
func WithOrigin(origin string) Option {
	return func(s *Server) error {
		if origin == "" {
			return errors.New("mcp: empty origin")
		}
		s.origin = origin
		return nil
	}
}

// Server is the MCP front door: an MCP server whose tools are the
// registry's live methods and whose tools/call goes through the ingress
// ([door.Request.Call]), so the same method checks, authorization, deadlines
// and limits apply as on every other transport. Make one with [New]; it
// follows the registry until [Server.Close].
//
// It speaks every revision the MCP SDK does. Up to 2025-11-25 a client
// holds a session (Streamable HTTP with Mcp-Session-Id), and the server
// may send it requests, such as elicitation/create, while it serves a
// call. From 2026-07-28 there are no sessions: each request names its
// revision (the MCP-Protocol-Version header) and its client's
// capabilities, and a call that needs the client's input returns its
// input requests with a request state, which the client echoes when it
// retries the call with its responses. A request is served by the
// handler of its revision.
type Server struct {
	ing door.Ingress
	reg *discovery.Registry
	srv *mcp.Server
	// sessions serves the revisions with sessions, sessionless the
	// later ones.
	sessions, sessionless http.Handler
	states                stateSigner

	log           *slog.Logger
	maxBody       int64
	maxDepth      int
	authenticated bool
	jobs          Jobs
	jobsPrefix    string
	origin        string

	ids  atomic.Uint64
	refs sync.Map // refHeader value → door.Request

	mu     sync.Mutex
	listed map[string]string // tool name → canonical JSON of what was added
	synced atomic.Uint64     // 1 + the registry's version that listed follows; 0 before the first sync

	kick        chan struct{}
	quit        chan struct{}
	done        chan struct{}
	closeOnce   sync.Once
	cancelWatch func()
}

var _ http.Handler = (*Server)(nil)

// New returns the front door of ing over the tools of reg, following reg
// until [Server.Close].
func New(ing door.Ingress, reg *discovery.Registry, opts ...Option) (*Server, error) {
	if ing == nil || reg == nil {
		return nil, errors.New("mcp: nil ingress or registry")
	}
	m := &Server{
		ing:      ing,
		reg:      reg,
		log:      slog.Default(),
		maxBody:  mcp.DefaultMaxRequestBodyBytes,
		maxDepth: DefaultMaxDepth,
		listed:   map[string]string{},
		states:   stateSigner{key: newStateKey()},
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	m.log = m.log.With("transport", "mcp")
	so := &mcp.ServerOptions{
		Logger: m.log,
		// Tools come and go with the workers, so the capability is
		// announced even while there are none.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	}
	if m.authenticated {
		// A list shown to one caller is no other's to cache.
		so.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.CacheScope = "private" }
	}
	m.srv = mcp.NewServer(&mcp.Implementation{Name: "toolbus", Version: "1"}, so)
	if m.authenticated {
		m.srv.AddReceivingMiddleware(m.scope)
	}
	server := func(*http.Request) *mcp.Server { return m.srv }
	m.sessions = mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Logger: m.log, MaxRequestBodyBytes: m.maxBody})
	m.sessionless = mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Logger: m.log, MaxRequestBodyBytes: m.maxBody, Stateless: true})
	if m.authenticated {
		bearer := auth.RequireBearerToken(m.sessionUser, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
		m.sessions, m.sessionless = bearer(m.sessions), bearer(m.sessionless)
	}

	m.sync()
	m.cancelWatch = reg.Watch(func() {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	})
	go m.loop()
	return m, nil
}

// ServeHTTP has the ingress read the request ([door.Ingress.Request]) and
// hands the request, with a reference to what it read, to the MCP handler
// of its revision: the stateless one from 2026-07-28, the one that keeps
// sessions before.
//
// With authentication on, the reference also stands in for the request's
// credentials, which the ingress has checked already: the SDK binds a
// session to the user its bearer-token middleware finds when the session
// is made, and answers 403 to a request of another user under that
// session's id (a POST, the event stream, a DELETE). That middleware reads
// the token from the Authorization header, so the reference goes there,
// and [Server.sessionUser] turns it back into the caller.
func (m *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The registry tells of changes on its own time; a request must not
	// see a tool list older than the registry's (a tool the ingress
	// already knows answered "unknown tool").
	if m.reg.Version()+1 != m.synced.Load() {
		m.sync()
	}
	hdr, herr := m.ing.Request(r)
	if herr != nil {
		writeError(w, http.StatusBadRequest, herr)
		return
	}
	if r.Method == http.MethodPost {
		body, status, err := m.read(w, r)
		if err != nil {
			writeError(w, status, err)
			return
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	ref := newRef()
	m.refs.Store(ref, hdr)
	defer m.refs.Delete(ref)
	r = r.Clone(r.Context())
	r.Header.Set(refHeader, ref)
	if m.authenticated {
		r.Header.Set("Authorization", "Bearer "+ref)
	}
	if sessionless(r.Header.Get(protocolVersionHeader)) {
		m.sessionless.ServeHTTP(w, r)
		return
	}
	m.sessions.ServeHTTP(w, r)
}

// protocolVersionHeader names the MCP revision of a request over
// Streamable HTTP; from 2026-07-28 every request carries it, server/discover
// included.
const protocolVersionHeader = "Mcp-Protocol-Version"

// firstSessionlessRevision is the first MCP revision without sessions,
// whose calls ask their client through input requests in their result and
// may not send it elicitation/create.
const firstSessionlessRevision = "2026-07-28"

// sessionless reports whether the MCP revision version has no sessions.
// Revision names are dates, so they compare as strings.
func sessionless(version string) bool { return version >= firstSessionlessRevision }

// read reads the body of a POST under the body limit and checks its
// depth, as POST /rpc does, before the SDK decodes it; a body over
// either limit is answered with the HTTP status and the error returned.
func (m *Server) read(w http.ResponseWriter, r *http.Request) ([]byte, int, *schema.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.maxBody))
	var tooLong *http.MaxBytesError
	switch {
	case errors.As(err, &tooLong):
		return nil, http.StatusRequestEntityTooLarge, schema.LimitError("max_body_bytes", m.maxBody, -1)
	case err != nil:
		return nil, http.StatusBadRequest, schema.NewError(schema.CodeParseError, "parse error: the body could not be read; send it again", nil)
	}
	if e := schema.CheckDepth(body, m.maxDepth); e != nil {
		return nil, http.StatusBadRequest, e
	}
	return body, 0, nil
}

// writeError answers a request the SDK never sees with e and a null id,
// under an HTTP error status, as Streamable HTTP has a server refuse a
// message it cannot take.
func writeError(w http.ResponseWriter, status int, e *schema.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := schema.Response{ID: json.RawMessage("null"), Error: e}.MarshalJSON()
	w.Write(b)
}

// sessionUser is the SDK's token verifier: the token is the reference
// ServeHTTP made, and the user the caller it stands for.
func (m *Server) sessionUser(_ context.Context, ref string, _ *http.Request) (*auth.TokenInfo, error) {
	v, ok := m.refs.Load(ref)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	caller := v.(door.Request).Caller
	if caller == "" {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: caller}, nil
}

// scope shows each caller the tools it may call: tools/list leaves the
// others out, and tools/call of one of them is answered as the SDK answers
// a tool that does not exist, so that a caller cannot tell the two apart.
func (m *Server) scope(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		mayCall := m.request(req.GetExtra()).mayCall
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" && !mayCall(p.Name) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", p.Name)}
		}
		res, err := next(ctx, method, req)
		if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
			shown := make([]*mcp.Tool, 0, len(list.Tools))
			for _, t := range list.Tools {
				if mayCall(t.Name) {
					shown = append(shown, t)
				}
			}
			list.Tools = shown
		}
		return res, err
	}
}

func newRef() string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// loop follows the registry until close.
func (m *Server) loop() {
	defer close(m.done)
	for {
		select {
		case <-m.quit:
			return
		case <-m.kick:
			m.sync()
		}
	}
}

// Close stops following the registry and ends the MCP sessions, so that
// their event streams do not hold the HTTP server's shutdown. A nil
// Server, and one closed already, is left as it is.
func (m *Server) Close() {
	if m == nil {
		return
	}
	m.closeOnce.Do(func() {
		m.cancelWatch()
		close(m.quit)
		<-m.done
		for ss := range m.srv.Sessions() {
			ss.Close()
		}
	})
}

// sync makes the MCP server's tools those of the registry; the SDK tells
// the connected clients that the list changed.
func (m *Server) sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	cat, version := m.reg.VersionedCatalog()
	if version+1 == m.synced.Load() {
		return // another sync got there first
	}
	want := map[string]*mcp.Tool{}
	for _, t := range cat.Tools {
		if tool, ok := mcpTool(t); ok {
			if m.origin != "" {
				tool.Meta = mcp.Meta{MetaOrigin: m.origin}
			}
			want[tool.Name] = tool
		}
	}
	var gone []string
	for name := range m.listed {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
			delete(m.listed, name)
		}
	}
	if len(gone) > 0 {
		m.srv.RemoveTools(gone...)
	}
	for name, tool := range want {
		b, _ := json.Marshal(tool)
		if m.listed[name] == string(b) {
			continue
		}
		m.listed[name] = string(b)
		m.srv.AddTool(tool, m.callTool)
	}
	m.synced.Store(version + 1)
}

// mcpTool returns the MCP tool of t, or false when MCP cannot list it: a
// pattern is not a callable name, and MCP arguments are always an object,
// so a tool whose params schema is not an object schema is left out.
func mcpTool(t discovery.Tool) (*mcp.Tool, bool) {
	if t.IsPattern() {
		return nil, false
	}
	input := map[string]any{"type": "object"}
	if len(t.Params) > 0 {
		var s map[string]any
		if err := json.Unmarshal(t.Params, &s); err != nil || (s["type"] != nil && s["type"] != "object") {
			return nil, false
		}
		s["type"] = "object"
		input = s
	}
	tool := &mcp.Tool{
		Name:        t.Name,
		Description: t.Description,
		InputSchema: input,
		Annotations: &mcp.ToolAnnotations{IdempotentHint: t.RetrySafe},
	}
	if out, _ := outputSchema(t.Result); out != nil {
		tool.OutputSchema = out
	}
	return tool, true
}

// wrapKey is the one member of the object that carries, as MCP structured
// content, a result that is not an object.
const wrapKey = "result"

// outputSchema returns the MCP output schema of a tool whose result schema
// is raw, and whether its results are wrapped. MCP structured content is
// an object (clients of revisions before 2025-11-25 take nothing else), so
// a result schema of objects is the output schema as it is, and any other
// (a number, an array, one that admits several types) is the schema of
// the wrapper {"result": ...}, whose $defs move up with it so that its
// references still resolve. A tool with no result schema, or one that is
// not JSON, has no output schema and is not wrapped: its object results go
// as they are and the others wrapped, marked "toolbus/wrapped" (see
// [success]).
func outputSchema(raw json.RawMessage) (out map[string]any, wrap bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var inner any
	if err := json.Unmarshal(raw, &inner); err != nil {
		return nil, false
	}
	s, isMap := inner.(map[string]any)
	if isMap && s["type"] == "object" {
		return s, false
	}
	out = map[string]any{"type": "object", "required": []any{wrapKey}}
	if isMap {
		if v, ok := s["$schema"]; ok {
			out["$schema"] = v
			delete(s, "$schema")
		}
		if _, ownID := s["$id"]; !ownID {
			for _, k := range []string{"$defs", "definitions"} {
				if v, ok := s[k]; ok {
					out[k] = v
					delete(s, k)
				}
			}
		}
	}
	out["properties"] = map[string]any{wrapKey: inner}
	return out, true
}

// wrapped reports whether the results of the registry's tool name are
// wrapped under its output schema.
func (m *Server) wrapped(name string) bool {
	t, ok := m.reg.Lookup(name)
	if !ok {
		return false
	}
	_, wrap := outputSchema(t.Result)
	return wrap
}

// success is the MCP answer of a call that answered result: the result's
// JSON text, for clients older than structured content, and the result
// as structured content, as it is when it is an object the output schema
// does not wrap, else as {"result": result} with _meta
// "toolbus/wrapped": true, so that a client such as the MCP bridge gets
// the value back whatever the tool's schema.
func success(result json.RawMessage, wrap bool) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(result)}}}
	if trimmed := bytes.TrimSpace(result); !wrap && len(trimmed) > 0 && trimmed[0] == '{' {
		res.StructuredContent = result
		return res
	}
	if len(bytes.TrimSpace(result)) == 0 {
		result = json.RawMessage("null")
	}
	res.StructuredContent = map[string]json.RawMessage{wrapKey: result}
	res.Meta = mcp.Meta{metaWrapped: true}
	return res
}

// callTool runs one tools/call as a JSON-RPC call of the same method
// through the ingress.
func (m *Server) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	hdr := m.request(req.Extra)
	var args json.RawMessage
	if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
		args = raw
	}
	if req.Params.RequestState != "" {
		return m.resume(ctx, req, hdr)
	}
	if res, ok := m.callAsJob(ctx, req, hdr, args); ok {
		return res, nil
	}
	r := hdr.call(ctx, m.nextID(), req.Params.Name, args)
	if r.Error != nil {
		return toolError(r.Error), nil
	}
	return success(r.Result, m.wrapped(req.Params.Name)), nil
}

// request returns what the ingress read from the HTTP request of an MCP
// message. When that request is over already, its headers are read again
// without a caller, which authorization refuses.
func (m *Server) request(extra *mcp.RequestExtra) request {
	if extra != nil && extra.Header != nil {
		if v, ok := m.refs.Load(extra.Header.Get(refHeader)); ok {
			return request{v.(door.Request)}
		}
	}
	r := &http.Request{Method: http.MethodPost, Header: http.Header{}}
	if extra != nil && extra.Header != nil {
		r.Header = extra.Header.Clone()
		r.Header.Del(refHeader)
	}
	hdr, _ := m.ing.Request(r)
	return request{hdr}
}

// request is a [door.Request] whose missing functions allow and answer
// nothing.
type request struct{ door.Request }

func (r request) mayCall(name string) bool { return r.MayCall != nil && r.MayCall(name) }

// call runs one call of method with params under r.
func (r request) call(ctx context.Context, id json.RawMessage, method string, params json.RawMessage) schema.Response {
	if r.Call == nil {
		return schema.Response{ID: id, Error: internalError()}
	}
	return r.Call(ctx, schema.Request{ID: id, Method: method, Params: params})
}

func (m *Server) nextID() json.RawMessage {
	return json.RawMessage(strconv.Quote("mcp-" + strconv.FormatUint(m.ids.Add(1), 10)))
}

// internalError is the answer for a call that got no usable answer.
func internalError() *schema.Error {
	return schema.NewError(schema.CodeInternal, "internal error: the call got no answer",
		map[string]any{"reason": schema.ReasonNoAnswer})
}

// toolError is the MCP answer for a call that failed: a tool result with
// isError, the message as its text, and the JSON-RPC error, code and
// data, under _meta "toolbus/error".
func toolError(e *schema.Error) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s (code %d)", e.Message, e.Code)}},
		Meta:    mcp.Meta{"toolbus/error": e},
	}
}
