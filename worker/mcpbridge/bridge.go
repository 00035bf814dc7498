package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os/exec"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/bridge"
)

// Defaults of [New].
const (
	DefaultMinBackoff = bridge.DefaultMinBackoff
	DefaultMaxBackoff = bridge.DefaultMaxBackoff
)

// Connector makes a new transport to the MCP server, once per connection:
// a command transport starts the process again each time. [Command] and
// [URL] make the usual ones.
type Connector func() mcp.Transport

// Command returns a connector that starts name with args and speaks MCP to
// it over its stdin and stdout (its stderr goes to the bridge's stderr).
func Command(name string, args ...string) Connector {
	return func() mcp.Transport {
		return &mcp.CommandTransport{Command: exec.Command(name, args...)}
	}
}

// URL returns a connector to the Streamable HTTP endpoint at url; client
// may be nil for a default client.
func URL(url string, client *http.Client) Connector {
	return func() mcp.Transport {
		return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: client}
	}
}

type config struct {
	kernel bridge.Config
	origin string
}

// Option configures [New].
type Option func(*config) error

// WithPrefix puts prefix and a dot before every method name ("fs" serves
// the tool read_file as fs.read_file). The prefix must follow the method
// grammar and not start with "rpc". Default none.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		c.kernel.Prefix = prefix
		return nil
	}
}

// WithOrigin names the cluster the bridge serves its tools on (see
// [github.com/toolbus/toolbus/bus.Origin]). A toolbus front door marks the tools it lists with the
// name of its own cluster, under _meta "toolbus/origin"; the bridge
// imports none whose mark is origin, so that a bridge pointed at its own
// cluster's /mcp does not serve that cluster's tools again under new
// names, and then those again, without end. It says so once, in one
// warning. Default none: every tool is imported.
func WithOrigin(origin string) Option {
	return func(c *config) error {
		c.origin = origin
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("mcpbridge: nil logger")
		}
		c.kernel.Logger = l
		return nil
	}
}

// WithBackoff sets the bounds of the wait between reconnection attempts,
// which doubles from minWait up to maxWait. A zero bound takes its
// default ([DefaultMinBackoff], [DefaultMaxBackoff]); [New] refuses
// bounds that are negative or out of order, as the bridge kernel checks
// them.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *config) error {
		c.kernel.MinBackoff, c.kernel.MaxBackoff = minWait, maxWait
		return nil
	}
}

// Bridge serves the tools of one MCP server on a runtime. Make one with
// [New], then [Bridge.Start] before the runtime's Start; [Bridge.Close]
// when done. Its methods are safe for concurrent use.
type Bridge struct {
	kernel *bridge.Kernel
}

// New returns a bridge that will serve the tools of the server connect
// reaches on rt.
func New(rt *worker.Runtime, connect Connector, opts ...Option) (*Bridge, error) {
	if rt == nil || connect == nil {
		return nil, errors.New("mcpbridge: nil runtime or connector")
	}
	cfg := config{kernel: bridge.Config{Remote: "MCP server", Logger: slog.Default()}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.kernel.Logger = cfg.kernel.Logger.With("component", "mcpbridge")
	a := &adapter{connect: connect, origin: cfg.origin, log: cfg.kernel.Logger}
	k, err := bridge.New(rt, a, cfg.kernel)
	if err != nil {
		return nil, fmt.Errorf("mcpbridge: %w", err)
	}
	a.client = mcp.NewClient(&mcp.Implementation{Name: "toolbus-mcpbridge", Version: "1"}, &mcp.ClientOptions{
		Logger: a.log,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			k.Relist()
		},
	})
	return &Bridge{kernel: k}, nil
}

// Start connects to the server, registers its tools on the runtime, and
// keeps the connection up until [Bridge.Close]. It fails when the first
// connection or listing fails, or ctx ends first.
func (b *Bridge) Start(ctx context.Context) error { return b.kernel.Start(ctx) }

// Methods returns the toolbus methods registered for the server's tools.
func (b *Bridge) Methods() []string { return b.kernel.Methods() }

// Close ends the connection (stopping a command it started) and the
// reconnecting. Calls afterwards are answered -32003. It does not shut the
// runtime down.
func (b *Bridge) Close() error { return b.kernel.Close() }

// adapter reaches the MCP server for the bridge's kernel.
type adapter struct {
	connect Connector
	origin  string
	log     *slog.Logger
	client  *mcp.Client
	// warned is set once the refusal of the cluster's own tools is
	// logged.
	warned atomic.Bool
}

var _ bridge.Adapter = (*adapter)(nil)

// Connect starts a session with the server, over a new transport.
func (a *adapter) Connect(ctx context.Context) (bridge.Conn, error) {
	t := a.connect()
	cs, err := a.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("mcpbridge: connect: %w", err)
	}
	return &session{a: a, cs: cs, server: reached(t)}, nil
}

// reached is what transport t reaches, for the log.
func reached(t mcp.Transport) string {
	switch t := t.(type) {
	case *mcp.StreamableClientTransport:
		return t.Endpoint
	case *mcp.CommandTransport:
		return t.Command.String()
	}
	return fmt.Sprintf("%T", t)
}

// session is one session with the MCP server.
type session struct {
	a      *adapter
	cs     *mcp.ClientSession
	server string
}

var _ bridge.Conn = (*session)(nil)

// Wait returns when the session has ended.
func (s *session) Wait() { s.cs.Wait() }

// Close ends the session, and the process of a command transport.
func (s *session) Close() error { return s.cs.Close() }

// List lists the server's tools, but for the cluster's own (see
// [WithOrigin]).
func (s *session) List(ctx context.Context) ([]bridge.Tool, error) {
	version := ""
	if ir := s.cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		version = ir.ServerInfo.Version
	}
	var tools []bridge.Tool
	refused := 0
	for tool, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcpbridge: list tools: %w", err)
		}
		if s.a.origin != "" && tool.Meta[metaOrigin] == s.a.origin {
			refused++
			continue
		}
		d, unwrap, err := descriptor(tool, version)
		if err != nil {
			s.a.log.Warn("tool has an unusable schema; served without it", "tool", tool.Name, "err", err)
		}
		tools = append(tools, bridge.Tool{Name: tool.Name, Descriptor: d, Call: s.caller(tool.Name, unwrap)})
	}
	s.a.log.Debug("listed the MCP server's tools", "offered", len(tools), "refused", refused)
	if refused > 0 && s.a.warned.CompareAndSwap(false, true) {
		s.a.log.Warn("the MCP server serves this cluster's own tools (their _meta toolbus/origin is this cluster's); they are not imported",
			"server", s.server, "origin", s.a.origin, "refused", refused)
	}
	return tools, nil
}

// descriptor returns the toolbus descriptor of an MCP tool, and whether
// its structured results wrap their value (see [wrapped]): the result
// schema is then the value's. A schema that cannot be encoded is left
// out, and reported.
func descriptor(tool *mcp.Tool, version string) (d schema.Descriptor, unwrap bool, err error) {
	d = schema.Descriptor{Description: tool.Description, Version: version}
	if tool.Annotations != nil {
		d.RetrySafe = tool.Annotations.IdempotentHint
	}
	output := tool.OutputSchema
	if inner, ok := wrapped(output); ok {
		output, unwrap = inner, true
	}
	var errs []error
	for _, s := range []struct {
		src any
		dst *json.RawMessage
	}{{tool.InputSchema, &d.Params}, {output, &d.Result}} {
		if s.src == nil {
			continue
		}
		raw, err := json.Marshal(s.src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		probe := schema.Descriptor{Name: "x", Params: raw}
		if err := probe.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		*s.dst = raw
	}
	return d, unwrap, errors.Join(errs...)
}

// wrapKey is the one member of the object that carries, as structured
// content, a value that is not an object: MCP clients before the
// 2025-11-25 revision take objects alone, so toolbus's front door, and
// other servers, wrap other values as {"result": value}.
const wrapKey = "result"

// metaOrigin is the _meta member of a tool that names the toolbus cluster
// it comes from, as toolbus's front door marks it.
const metaOrigin = "toolbus/origin"

// metaWrapped is the _meta member of a result whose structured content
// is such a wrapper, as toolbus's front door marks it.
const metaWrapped = "toolbus/wrapped"

// wrapped returns the schema of the wrapped value when output is exactly
// the schema of the wrapper: an object whose one member, required, is
// "result" (with $schema and $defs, which go back into the value's
// schema).
func wrapped(output any) (inner any, ok bool) {
	s, ok := output.(map[string]any)
	if !ok || s["type"] != "object" {
		return nil, false
	}
	props, _ := s["properties"].(map[string]any)
	required, _ := s["required"].([]any)
	if len(props) != 1 || props[wrapKey] == nil || len(required) != 1 || required[0] != wrapKey {
		return nil, false
	}
	for k := range s {
		switch k {
		case "type", "properties", "required", "$schema", "$defs", "definitions":
		default:
			return nil, false
		}
	}
	inner = props[wrapKey]
	if m, isMap := inner.(map[string]any); isMap {
		m = maps.Clone(m)
		for _, k := range []string{"$schema", "$defs", "definitions"} {
			if v, ok := s[k]; ok && m[k] == nil {
				m[k] = v
			}
		}
		inner = m
	}
	return inner, true
}

// MethodName returns the toolbus method serving the MCP tool named tool
// under prefix, as [schema.FitMethodName] fits it to the method grammar.
func MethodName(prefix, tool string) (string, bool) {
	return schema.FitMethodName(prefix, tool)
}

// caller forwards calls to the MCP tool named tool, whose structured
// results wrap their value when unwrap is set.
func (s *session) caller(tool string, unwrap bool) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, req *worker.Request) (any, error) {
		args := json.RawMessage(`{}`)
		if p := strings.TrimSpace(string(req.Params)); p != "" && p != "null" {
			if p[0] != '{' {
				return nil, worker.InvalidParams("", "an MCP tool takes its arguments as a JSON object")
			}
			args = req.Params
		}
		res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("mcp tools/call %s: %w", tool, err)
		}
		if res.IsError {
			return nil, schema.NewError(schema.CodeToolError, "tool error: "+text(res), map[string]any{"content": res.Content})
		}
		return result(res, unwrap)
	})
}

// result is what a successful tool result answers: its structured
// content (the value inside when it is a wrapper, as the tool's output
// schema or the result's _meta "toolbus/wrapped" says), else its text
// when all of it is text, else its content.
func result(res *mcp.CallToolResult, unwrap bool) (any, error) {
	if res.StructuredContent != nil {
		return structured(res, unwrap || res.Meta[metaWrapped] == true)
	}
	allText := len(res.Content) > 0
	for _, c := range res.Content {
		if _, ok := c.(*mcp.TextContent); !ok {
			allText = false
		}
	}
	if allText {
		return text(res), nil
	}
	return res.Content, nil
}

// structured returns the structured content of res, or the value it wraps.
// The client decodes it into Go values, where a big integer loses digits;
// the text of a result is most often the JSON of the same value, as the
// server spelt it, so that text is the answer when it decodes to the same
// value.
func structured(res *mcp.CallToolResult, unwrap bool) (json.RawMessage, error) {
	v := res.StructuredContent
	if m, ok := v.(map[string]any); ok && unwrap && len(m) == 1 {
		if inner, ok := m[wrapKey]; ok {
			v = inner
		}
	}
	if len(res.Content) == 1 {
		if t, ok := res.Content[0].(*mcp.TextContent); ok {
			var tv any
			if json.Unmarshal([]byte(t.Text), &tv) == nil && reflect.DeepEqual(tv, v) {
				return json.RawMessage(t.Text), nil
			}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("mcp tools/call: structured content: %w", err)
	}
	return b, nil
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
