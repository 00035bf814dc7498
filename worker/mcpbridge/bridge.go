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
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// Defaults of [New].
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
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
	prefix     string
	origin     string
	logger     *slog.Logger
	minBackoff time.Duration
	maxBackoff time.Duration
}

// Option configures [New].
type Option func(*config) error

// WithPrefix puts prefix and a dot before every method name ("fs" serves
// the tool read_file as fs.read_file). The prefix must follow the method
// grammar and not start with "rpc". Default none.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := schema.ValidateMethod(prefix); err != nil {
			return fmt.Errorf("mcpbridge: prefix %q: %w", prefix, err)
		}
		if schema.IsReserved(prefix+".x") || prefix == "rpc" {
			return fmt.Errorf("mcpbridge: prefix %q is reserved for the ingress", prefix)
		}
		c.prefix = prefix
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
		c.logger = l
		return nil
	}
}

// WithBackoff sets the bounds of the wait between reconnection attempts,
// which doubles from minWait up to maxWait (defaults [DefaultMinBackoff]
// and [DefaultMaxBackoff]).
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *config) error {
		if minWait <= 0 || maxWait < minWait {
			return fmt.Errorf("mcpbridge: backoff bounds must be positive and ordered, got %v and %v", minWait, maxWait)
		}
		c.minBackoff, c.maxBackoff = minWait, maxWait
		return nil
	}
}

// Bridge serves the tools of one MCP server on a runtime. Make one with
// [New], then [Bridge.Start] before the runtime's Start; [Bridge.Close]
// when done. Its methods are safe for concurrent use.
type Bridge struct {
	rt      *worker.Runtime
	connect Connector
	cfg     config
	log     *slog.Logger
	client  *mcp.Client

	mu      sync.Mutex
	session *mcp.ClientSession // nil while disconnected
	tools   map[string]string  // method → MCP tool name, of every tool registered
	offered map[string]bool    // MCP tool names the server offers now
	started bool
	server  string // what the last connection reached, for the log
	warned  bool   // the refusal of the cluster's own tools was logged

	refresh chan struct{}
	// ctx spans the bridge's life, for connecting in the background;
	// Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a bridge that will serve the tools of the server connect
// reaches on rt.
func New(rt *worker.Runtime, connect Connector, opts ...Option) (*Bridge, error) {
	if rt == nil || connect == nil {
		return nil, errors.New("mcpbridge: nil runtime or connector")
	}
	cfg := config{logger: slog.Default(), minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	// The bridge's context spans its life, not any request.
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bridge{
		rt:      rt,
		connect: connect,
		cfg:     cfg,
		log:     cfg.logger.With("component", "mcpbridge"),
		tools:   map[string]string{},
		offered: map[string]bool{},
		refresh: make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	b.client = mcp.NewClient(&mcp.Implementation{Name: "toolbus-mcpbridge", Version: "1"}, &mcp.ClientOptions{
		Logger: b.log,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case b.refresh <- struct{}{}:
			default:
			}
		},
	})
	return b, nil
}

// Start connects to the server, registers its tools on the runtime, and
// keeps the connection up until [Bridge.Close]. It fails when the first
// connection or listing fails, or ctx ends first.
func (b *Bridge) Start(ctx context.Context) error {
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return errors.New("mcpbridge: already started")
	}
	b.started = true
	b.mu.Unlock()
	cs, err := b.client.Connect(ctx, b.dial(), nil)
	if err != nil {
		close(b.done)
		return fmt.Errorf("mcpbridge: connect: %w", err)
	}
	if err := b.sync(ctx, cs); err != nil {
		cs.Close()
		close(b.done)
		return err
	}
	b.mu.Lock()
	b.session = cs
	b.mu.Unlock()
	go b.supervise(cs)
	return nil
}

// Methods returns the toolbus methods registered for the server's tools.
func (b *Bridge) Methods() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := make([]string, 0, len(b.tools))
	for m := range b.tools {
		ms = append(ms, m)
	}
	return ms
}

// Close ends the connection (stopping a command it started) and the
// reconnecting. Calls afterwards are answered -32003. It does not shut the
// runtime down.
func (b *Bridge) Close() error {
	b.cancel()
	b.mu.Lock()
	cs := b.session
	b.session = nil
	b.mu.Unlock()
	var err error
	if cs != nil {
		err = cs.Close()
	}
	<-b.done
	return err
}

// supervise waits for the session to end, then reconnects with backoff,
// until Close. It also re-lists the tools when the server says they
// changed.
func (b *Bridge) supervise(cs *mcp.ClientSession) {
	defer close(b.done)
	for {
		ended := make(chan struct{})
		go func() { cs.Wait(); close(ended) }()
		for waiting := true; waiting; {
			select {
			case <-b.ctx.Done():
				cs.Close()
				<-ended
				return
			case <-ended:
				waiting = false
			case <-b.refresh:
				if err := b.sync(b.ctx, cs); err != nil {
					b.log.Warn("cannot list the server's tools again", "err", err)
				}
			}
		}
		b.mu.Lock()
		b.session = nil
		b.mu.Unlock()
		// The connection is gone, but the session still holds what it
		// set up for it (its listen for notifications) until closed.
		cs.Close()
		b.log.Warn("the MCP server went away; reconnecting")
		if cs = b.reconnect(); cs == nil {
			return
		}
	}
}

// reconnect connects again, waiting longer after each failure, and
// returns the new session, or nil once the bridge is closed.
func (b *Bridge) reconnect() *mcp.ClientSession {
	wait := b.cfg.minBackoff
	for {
		t := time.NewTimer(wait)
		select {
		case <-b.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		cs, err := b.client.Connect(b.ctx, b.dial(), nil)
		if err == nil {
			err = b.sync(b.ctx, cs)
			if err != nil {
				cs.Close()
			}
		}
		if err == nil {
			b.mu.Lock()
			if b.ctx.Err() != nil {
				b.mu.Unlock()
				cs.Close()
				return nil
			}
			b.session = cs
			b.mu.Unlock()
			b.log.Info("reconnected to the MCP server")
			return cs
		}
		b.log.Warn("cannot reconnect to the MCP server", "err", err, "retry_in", wait)
		wait = min(2*wait, b.cfg.maxBackoff)
	}
}

// dial makes the transport of a new connection and notes what it
// reaches.
func (b *Bridge) dial() mcp.Transport {
	t := b.connect()
	server := fmt.Sprintf("%T", t)
	switch t := t.(type) {
	case *mcp.StreamableClientTransport:
		server = t.Endpoint
	case *mcp.CommandTransport:
		server = t.Command.String()
	}
	b.mu.Lock()
	b.server = server
	b.mu.Unlock()
	return t
}

// sync lists the server's tools and registers those not registered yet. A
// runtime cannot forget a method, so a tool the server no longer offers
// stays registered and is answered -32601.
func (b *Bridge) sync(ctx context.Context, cs *mcp.ClientSession) error {
	version := ""
	if ir := cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
		version = ir.ServerInfo.Version
	}
	offered := map[string]bool{}
	refused := 0
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcpbridge: list tools: %w", err)
		}
		if b.cfg.origin != "" && tool.Meta[metaOrigin] == b.cfg.origin {
			refused++
			continue
		}
		offered[tool.Name] = true
		method, ok := MethodName(b.cfg.prefix, tool.Name)
		if !ok {
			b.log.Warn("tool name cannot be a method name; skipped", "tool", tool.Name)
			continue
		}
		b.mu.Lock()
		prev, registered := b.tools[method]
		b.mu.Unlock()
		if registered {
			if prev != tool.Name {
				b.log.Warn("two tools map to one method; the second is skipped", "method", method, "tool", tool.Name, "other", prev)
			}
			continue
		}
		d, unwrap, err := descriptor(tool, version)
		if err != nil {
			b.log.Warn("tool has an unusable schema; served without it", "tool", tool.Name, "err", err)
		}
		if err := b.rt.Handle(method, b.handler(tool.Name, unwrap), worker.Describe(d)); err != nil {
			b.log.Warn("cannot register tool", "tool", tool.Name, "method", method, "err", err)
			continue
		}
		b.mu.Lock()
		b.tools[method] = tool.Name
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.offered = offered
	warn := refused > 0 && !b.warned
	b.warned = b.warned || warn
	server := b.server
	b.mu.Unlock()
	b.log.Debug("listed the MCP server's tools", "offered", len(offered), "refused", refused)
	if warn {
		b.log.Warn("the MCP server serves this cluster's own tools (their _meta toolbus/origin is this cluster's); they are not imported",
			"server", server, "origin", b.cfg.origin, "refused", refused)
	}
	return nil
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

// handler forwards calls of a method to the MCP tool named tool, whose
// structured results wrap their value when unwrap is set.
func (b *Bridge) handler(tool string, unwrap bool) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, req *worker.Request) (any, error) {
		b.mu.Lock()
		cs, offered := b.session, b.offered[tool]
		b.mu.Unlock()
		if cs == nil {
			return nil, schema.NewError(schema.CodeUnavailable, "unavailable: the MCP server behind "+req.Method+" is reconnecting",
				map[string]any{"retryable": true, "retry_after_ms": b.cfg.minBackoff.Milliseconds(), "method": req.Method})
		}
		if !offered {
			return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: the MCP server no longer offers "+tool,
				map[string]any{"reason": schema.ReasonToolWithdrawn, "method": req.Method})
		}
		args := json.RawMessage(`{}`)
		if p := strings.TrimSpace(string(req.Params)); p != "" && p != "null" {
			if p[0] != '{' {
				return nil, worker.InvalidParams("", "an MCP tool takes its arguments as a JSON object")
			}
			args = req.Params
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
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
