package toolbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

// mcpSession connects the SDK's client to the cluster's /mcp over HTTP;
// changed receives a value for every tools/list_changed notification.
func mcpSession(t *testing.T, c *toolbustest.Cluster, changed chan<- struct{}) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if changed != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "toolbustest", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.BaseURL + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPFrontDoor(t *testing.T) {
	var calls atomic.Int64
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(mathTools(&calls)),
		toolbustest.WithTools(func(rt *worker.Runtime) error {
			return rt.Handle("bank.pay", worker.Typed(func(context.Context, struct{}) (any, error) {
				return nil, schema.NewError(2001, "insufficient funds", nil)
			}))
		}))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("bank.pay"); return ok }, "tools appear")
	changed := make(chan struct{}, 1)
	cs := mcpSession(t, c, changed)

	if got, want := toolNames(t, cs), []string{"bank.pay", "math.add"}; !slices.Equal(got, want) {
		t.Fatalf("tools/list = %v, want %v", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tests := []struct {
		name     string
		tool     string
		args     any
		wantText string
		wantErr  bool
	}{
		{"result", "math.add", map[string]any{"a": 2, "b": 3}, "5", false},
		{"tool error keeps its code", "bank.pay", map[string]any{}, "insufficient funds (code 2001)", true},
		{"invalid params", "math.add", map[string]any{"a": "two"}, "code -32602", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("tools/call %s: %v", tt.tool, err)
			}
			if r.IsError != tt.wantErr || !strings.Contains(textOf(r), tt.wantText) {
				t.Errorf("tools/call %s = isError %v %q, want isError %v containing %q", tt.tool, r.IsError, textOf(r), tt.wantErr, tt.wantText)
			}
		})
	}

	// A worker with a new tool joins: the client hears that the list
	// changed, and the new list has it.
	c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.Handle("text.upper", worker.Typed(func(_ context.Context, p struct {
			S string `json:"s"`
		}) (string, error) {
			return strings.ToUpper(p.S), nil
		}))
	})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed notification within 10s of a new tool")
	}
	toolbustest.Eventually(t, func() bool { return slices.Contains(toolNames(t, cs), "text.upper") }, "the new tool is listed")
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "text.upper", Arguments: map[string]any{"s": "hi"}})
	if err != nil || r.IsError || textOf(r) != `"HI"` {
		t.Fatalf("tools/call text.upper = %v %v, want \"HI\"", r, err)
	}
}

func TestMCPCallHonoursDeadlines(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.Handle("slow", worker.Typed(func(ctx context.Context, _ struct{}) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}), worker.Describe(schema.Descriptor{TimeoutMS: 200}))
	}))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("slow"); return ok }, "slow appears")
	cs := mcpSession(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var e *schema.Error
	if b, _ := json.Marshal(r.Meta["toolbus/error"]); json.Unmarshal(b, &e) != nil || !errors.Is(e, schema.ErrTimeout) {
		t.Fatalf("tools/call slow = %q meta %v, want a timeout under the tool's 200ms", textOf(r), r.Meta)
	}
}

func TestMCPProgressOfJobs(t *testing.T) {
	release := make(chan struct{})
	c := toolbustest.Start(t, toolbustest.WithDiscovery(),
		toolbustest.WithJobs(), toolbustest.WithGateway(func(c *node.GatewayConfig) { c.Jobs.ProgressInterval = 10 * time.Millisecond }),
		toolbustest.WithTools(func(rt *worker.Runtime) error {
			return rt.Handle("report", worker.Typed(func(ctx context.Context, _ struct{}) (string, error) {
				worker.Progress(ctx, 50, "half way")
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return "done", nil
			}))
		}))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("report"); return ok }, "report appears")
	toolbustest.Eventually(t, func() bool { return c.Jobs.Promotable(context.Background(), "report") }, "a job runner serves report")

	progress := make(chan *mcp.ProgressNotificationParams, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "toolbustest", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.BaseURL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	params := &mcp.CallToolParams{Name: "report", Arguments: map[string]any{}}
	params.SetProgressToken("p-1")
	type outcome struct {
		r   *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := cs.CallTool(ctx, params)
		done <- outcome{r, err}
	}()
	select {
	case p := <-progress:
		if p.ProgressToken != "p-1" || p.Progress != 50 || p.Total != 100 || p.Message != "half way" {
			t.Errorf("progress = %+v, want token p-1, 50 of 100, half way", p)
		}
	case o := <-done:
		t.Fatalf("tools/call ended before any progress: %v %v", o.r, o.err)
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
	close(release)
	o := <-done
	if o.err != nil || o.r.IsError || textOf(o.r) != `"done"` {
		t.Fatalf("tools/call report = %q %v, want \"done\"", textOf(o.r), o.err)
	}
}

// TestMCPAtItsBoundNoJobIsMade checks that a tools/call with progress,
// which runs as a job and follows it, is refused before its job exists
// when its caller is at its bound of subscriptions: the refusal never
// comes with a job that runs anyway.
func TestMCPAtItsBoundNoJobIsMade(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	c := toolbustest.Start(t, toolbustest.WithDiscovery(),
		toolbustest.WithJobs(), toolbustest.WithGateway(func(c *node.GatewayConfig) { c.Jobs.MaxSubscriptions, c.Jobs.CallerMaxSubscriptions = 1, 1 }),
		toolbustest.WithTools(func(rt *worker.Runtime) error {
			return rt.Handle("report", worker.Typed(func(ctx context.Context, _ struct{}) (string, error) {
				entered <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return "done", nil
			}))
		}))
	t.Cleanup(func() { close(release) }) // before the cluster stops: its jobs end
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("report"); return ok }, "report appears")
	toolbustest.Eventually(t, func() bool { return c.Jobs.Promotable(context.Background(), "report") }, "a job runner serves report")
	cs := mcpSession(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobsListed := func() int {
		t.Helper()
		r := c.Call(t, schema.MethodJobsList, `{"limit":100}`)
		var l struct {
			Jobs []json.RawMessage `json:"jobs"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &l) != nil {
			t.Fatalf("rpc.jobs.list = %s %v", r.Result, r.Error)
		}
		return len(l.Jobs)
	}
	withProgress := func(token string) *mcp.CallToolParams {
		p := &mcp.CallToolParams{Name: "report", Arguments: map[string]any{}}
		p.SetProgressToken(token)
		return p
	}

	// The first call's job runs and its follow holds the one subscription.
	go func() { _, _ = cs.CallTool(ctx, withProgress("first")) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first call's job never ran")
	}
	before := jobsListed()
	r, err := cs.CallTool(ctx, withProgress("second"))
	if err != nil || !r.IsError || !strings.Contains(textOf(r), "max_subscriptions") {
		t.Errorf("tools/call at the bound of subscriptions = %q %v, want a tool error naming max_subscriptions", textOf(r), err)
	}
	if after := jobsListed(); after != before {
		t.Errorf("jobs after the refused call = %d, want %d as before: a refused call made its job", after, before)
	}
	select {
	case <-entered:
		t.Error("the refused call's tool ran")
	default:
	}
}

// TestMCPStructuredResults checks that every demo tool is listed with a
// description, that tools with a known result schema publish an output
// schema (results that are not objects under the {"result": ...}
// wrapper), and that every result carries structured content that fits
// it, besides its JSON text.
func TestMCPStructuredResults(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery())
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("sum"); return ok }, "the demo tools appear")
	cs := mcpSession(t, c, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listed := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		listed[tool.Name] = tool
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
	}
	outSchema := func(name string) string {
		b, _ := json.Marshal(listed[name].OutputSchema)
		return string(b)
	}
	for name, want := range map[string]string{
		"sum":   `{"properties":{"result":{"type":"number"}},"required":["result"],"type":"object"}`,
		"sleep": `{"additionalProperties":false,"properties":{"slept_ms":{"type":"integer"}},"required":["slept_ms"],"type":"object"}`,
		"echo":  `null`,
	} {
		if listed[name] == nil {
			t.Fatalf("tools/list has no %s", name)
		}
		if got := outSchema(name); got != want {
			t.Errorf("outputSchema of %s = %s, want %s", name, got, want)
		}
	}

	tests := []struct {
		tool           string
		args           any
		wantText       string
		wantStructured string
	}{
		{"sleep", map[string]any{"ms": 1}, `{"slept_ms":1}`, `{"slept_ms":1}`},
		{"get_data", map[string]any{}, `["hello",5]`, `{"result":["hello",5]}`},
		{"echo", map[string]any{"a": 1}, `{"a":1}`, `{"a":1}`},
		{"update", map[string]any{}, `null`, `{"result":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil || r.IsError {
				t.Fatalf("tools/call %s = %v %v", tt.tool, r, err)
			}
			got, _ := json.Marshal(r.StructuredContent)
			if textOf(r) != tt.wantText || string(got) != tt.wantStructured {
				t.Errorf("tools/call %s = text %s, structured %s; want %s, %s", tt.tool, textOf(r), got, tt.wantText, tt.wantStructured)
			}
		})
	}
}

// records counts what a bridge logs: warnings, and the tools each listing
// refused.
type records struct {
	mu       sync.Mutex
	warnings []string
	refused  chan int64
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		r.mu.Lock()
		r.warnings = append(r.warnings, rec.Message)
		r.mu.Unlock()
	}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "refused" {
			select {
			case r.refused <- a.Value.Int64():
			default:
			}
		}
		return true
	})
	return nil
}

func (r *records) warned() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

// TestMCPBridgeOfItsOwnCluster points two bridges of cluster a at MCP
// front doors: the one at a's own imports none of a's tools, not even
// those the other bridge adds later, and says so in one warning; the one
// at cluster b's imports b's tools, whose values come back as b's tools
// answered them.
func TestMCPBridgeOfItsOwnCluster(t *testing.T) {
	a := toolbustest.Start(t, toolbustest.WithDiscovery())
	b := toolbustest.Start(t, toolbustest.WithDiscovery())
	for _, c := range []*toolbustest.Cluster{a, b} {
		toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("get_data"); return ok }, "the demo tools appear")
	}
	nc, err := a.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	origin := bus.Origin(nc, bus.DefaultPrefix)
	if origin == "" {
		t.Fatal("cluster a has no origin")
	}
	own := &records{refused: make(chan int64, 16)}
	quiet := slog.New(slog.DiscardHandler)
	var self, other *mcpbridge.Bridge
	a.AddWorker(t, func(rt *worker.Runtime) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, br := range []struct {
			b      **mcpbridge.Bridge
			url    string
			prefix string
			log    *slog.Logger
		}{{&self, a.BaseURL, "self", slog.New(own)}, {&other, b.BaseURL, "other", quiet}} {
			var err error
			if *br.b, err = mcpbridge.New(rt, mcpbridge.URL(br.url+"/mcp", nil),
				mcpbridge.WithPrefix(br.prefix), mcpbridge.WithOrigin(origin), mcpbridge.WithLogger(br.log)); err != nil {
				return err
			}
			if err := (*br.b).Start(ctx); err != nil {
				return err
			}
			t.Cleanup(func() { (*br.b).Close() })
		}
		return nil
	})

	if got := self.Methods(); len(got) != 0 {
		t.Errorf("the bridge of a's own /mcp serves %v, want nothing", got)
	}
	if got := other.Methods(); !slices.Contains(got, "other.get_data") || !slices.Contains(got, "other.sleep") {
		t.Errorf("the bridge of b's /mcp serves %v, want b's tools", got)
	}
	for _, tt := range []struct{ method, params, want string }{
		{"other.get_data", "", `["hello",5]`},
		{"other.sleep", `{"ms":1}`, `{"slept_ms":1}`},
		{"other.update", "", `null`},
	} {
		r := a.Call(t, tt.method, tt.params)
		if r.Error != nil || string(r.Result) != tt.want {
			t.Errorf("%s through a = %s %v, want %s", tt.method, r.Result, r.Error, tt.want)
		}
	}

	if t.Failed() {
		return // the listing awaited below may never come
	}
	// a's front door now lists the other bridge's tools too, marked as
	// a's: the bridge of a's own /mcp hears the list changed, refuses
	// them as well, and says nothing more.
	first := <-own.refused
	for n := first; n <= first; {
		n = <-own.refused
	}
	if got := self.Methods(); len(got) != 0 {
		t.Errorf("the bridge of a's own /mcp serves %v after the list changed, want nothing", got)
	}
	if got := own.warned(); len(got) != 1 {
		t.Errorf("the bridge of a's own /mcp warned %q, want one warning", got)
	}
}
