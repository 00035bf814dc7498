package ingress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
)

// MCPPath is where the MCP front door listens (Streamable HTTP).
const MCPPath = "/mcp"

// mcpRefHeader carries, from the HTTP request that brought an MCP message
// to the tool handler that runs it, a reference to what the ingress read
// from that request (deadline, caller). A client's own value of it is
// always replaced.
const mcpRefHeader = "Toolbus-Mcp-Ref"

// mcpDoor is the MCP front door: an MCP server whose tools are the
// registry's live methods and whose tools/call goes through the same plan
// and dispatcher as every other transport, so the same method checks,
// authorization, deadlines and limits apply.
type mcpDoor struct {
	s       *Server
	srv     *mcp.Server
	handler http.Handler

	ids  atomic.Uint64
	refs sync.Map // mcpRefHeader value → callHeaders

	mu     sync.Mutex
	listed map[string]string // tool name → canonical JSON of what was added

	kick        chan struct{}
	quit        chan struct{}
	done        chan struct{}
	closeOnce   sync.Once
	cancelWatch func()
}

var _ http.Handler = (*mcpDoor)(nil)

func newMCPDoor(s *Server) *mcpDoor {
	m := &mcpDoor{
		s:      s,
		listed: map[string]string{},
		kick:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	opts := &mcp.ServerOptions{
		Logger: s.log.With("transport", "mcp"),
		// Tools come and go with the workers, so the capability is
		// announced even while there are none.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	}
	if s.auth != nil {
		// A list shown to one caller is no other's to cache.
		opts.SetCacheable = func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.CacheScope = "private" }
	}
	m.srv = mcp.NewServer(&mcp.Implementation{Name: "toolbus", Version: "1"}, opts)
	if s.auth != nil {
		m.srv.AddReceivingMiddleware(m.scope)
	}
	m.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.srv },
		&mcp.StreamableHTTPOptions{Logger: s.log.With("transport", "mcp"), MaxRequestBodyBytes: s.cfg.limits.MaxBodyBytes})
	if s.auth != nil {
		m.handler = auth.RequireBearerToken(m.sessionUser, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(m.handler)
	}

	m.sync()
	m.cancelWatch = s.cfg.registry.Watch(func() {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	})
	go m.loop()
	return m
}

// ServeHTTP reads the request's call headers (and the caller the
// authentication middleware found) and hands the request to the MCP
// handler with a reference to them.
//
// With authentication on, the reference also stands in for the request's
// credentials, which the ingress has checked already: the SDK binds a
// session to the user its bearer-token middleware finds when the session
// is made, and answers 403 to a request of another user under that
// session's id (a POST, the event stream, a DELETE). That middleware reads
// the token from the Authorization header, so the reference goes there,
// and [mcpDoor.sessionUser] turns it back into the caller.
func (m *mcpDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr, herr := m.s.callHeaders(r)
	if herr != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		b, _ := schema.Response{ID: json.RawMessage("null"), Error: herr}.MarshalJSON()
		w.Write(b)
		return
	}
	ref := newRef()
	m.refs.Store(ref, hdr)
	defer m.refs.Delete(ref)
	r = r.Clone(r.Context())
	r.Header.Set(mcpRefHeader, ref)
	if m.s.auth != nil {
		r.Header.Set("Authorization", "Bearer "+ref)
	}
	m.handler.ServeHTTP(w, r)
}

// sessionUser is the SDK's token verifier: the token is the reference
// ServeHTTP made, and the user the caller it stands for.
func (m *mcpDoor) sessionUser(_ context.Context, ref string, _ *http.Request) (*auth.TokenInfo, error) {
	v, ok := m.refs.Load(ref)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	caller := v.(callHeaders).caller
	if caller == nil {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: caller.name}, nil
}

// scope shows each caller the tools it may call: tools/list leaves the
// others out, and tools/call of one of them is answered as the SDK answers
// a tool that does not exist, so that a caller cannot tell the two apart.
func (m *mcpDoor) scope(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		v := m.s.auth.view(m.headers(req.GetExtra()).caller)
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" && !v.mayCall(p.Name) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", p.Name)}
		}
		res, err := next(ctx, method, req)
		if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
			shown := make([]*mcp.Tool, 0, len(list.Tools))
			for _, t := range list.Tools {
				if v.mayCall(t.Name) {
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
func (m *mcpDoor) loop() {
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

// close stops following the registry and ends the MCP sessions, so that
// their event streams do not hold the HTTP server's shutdown. Nil-safe.
func (m *mcpDoor) close() {
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
func (m *mcpDoor) sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]*mcp.Tool{}
	for _, t := range m.s.cfg.registry.Catalog().Tools {
		if tool, ok := mcpTool(t); ok {
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
}

// mcpTool returns the MCP tool of t, or false when MCP cannot list it: a
// pattern is not a callable name, and MCP arguments are always an object,
// so a tool whose params schema is not an object schema is left out.
func mcpTool(t Tool) (*mcp.Tool, bool) {
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
	if out, ok := objectSchema(t.Result); ok {
		tool.OutputSchema = out
	}
	return tool, true
}

// objectSchema returns raw when it is a schema of JSON objects, which is
// the only kind MCP takes as an output schema.
func objectSchema(raw json.RawMessage) (map[string]any, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil || s["type"] != "object" {
		return nil, false
	}
	return s, true
}

// callTool runs one tools/call as a JSON-RPC call of the same method
// through the server's plan and dispatcher.
func (m *mcpDoor) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	hdr := m.headers(req.Extra)
	var args json.RawMessage
	if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
		args = raw
	}
	if res, ok := m.callAsJob(ctx, req, hdr, args); ok {
		return res, nil
	}
	r := m.run(ctx, hdr, req.Params.Name, args)
	if r.Error != nil {
		return toolError(r.Error), nil
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Result)}}}
	if t, ok := m.s.cfg.registry.Lookup(req.Params.Name); ok {
		if _, ok := objectSchema(t.Result); ok {
			res.StructuredContent = r.Result
		}
	}
	return res, nil
}

// headers returns what the HTTP request of an MCP message asked for.
func (m *mcpDoor) headers(extra *mcp.RequestExtra) callHeaders {
	if extra == nil || extra.Header == nil {
		return callHeaders{}
	}
	if v, ok := m.refs.Load(extra.Header.Get(mcpRefHeader)); ok {
		return v.(callHeaders)
	}
	hdr, _ := parseCallHeaders(extra.Header)
	return hdr
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
