package mcpbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

// testServer is an MCP server written with the same SDK.
func testServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "0.1.0"}, &mcp.ServerOptions{Logger: quiet})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds a and b", Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a addArgs) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{a.A + a.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "greet"},
		func(_ context.Context, _ *mcp.CallToolRequest, a struct {
			Name string `json:"name"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello, " + a.Name}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "boom"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("kaboom")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "wait"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(s, &mcp.Tool{Name: "count"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, int, error) {
			return nil, 5, nil
		})
	// pair wraps its array result as a server for older clients does.
	s.AddTool(&mcp.Tool{Name: "pair", InputSchema: map[string]any{"type": "object"}, OutputSchema: map[string]any{
		"type": "object", "properties": map[string]any{"result": map[string]any{"type": "array"}}, "required": []string{"result"},
	}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `[1, 2]`}},
			StructuredContent: map[string]any{"result": []int{1, 2}}}, nil
	})
	// big wraps its result as toolbus's front door does, with no output
	// schema; the text keeps every digit.
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `12345678901234567890`}},
				StructuredContent: map[string]any{"result": json.RawMessage(`12345678901234567890`)},
				Meta:              mcp.Meta{"toolbus/wrapped": true}}, nil
		})
	// plain answers an object that merely looks like a wrapper.
	s.AddTool(&mcp.Tool{Name: "plain", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a result"}},
				StructuredContent: map[string]any{"result": "x"}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "weird name!"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	return s
}

// inMemory returns a connector to srv over in-memory transports; kill
// closes the server's side of every connection made so far, as a server
// going away would.
func inMemory(t *testing.T, srv *mcp.Server) (connect mcpbridge.Connector, kill func()) {
	t.Helper()
	var mu sync.Mutex
	var sessions []*mcp.ServerSession
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, ss := range sessions {
			ss.Close()
		}
	})
	connect = func() mcp.Transport {
		ct, st := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(context.Background(), st, nil)
		if err != nil {
			t.Errorf("server connect: %v", err)
		}
		mu.Lock()
		sessions = append(sessions, ss)
		mu.Unlock()
		return ct
	}
	kill = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, ss := range sessions {
			ss.Close()
		}
		sessions = nil
	}
	return connect, kill
}

// newRuntime returns a runtime on an embedded NATS server.
func newRuntime(t *testing.T) *worker.Runtime {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt, err := worker.New(nc, worker.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	return rt
}

func startBridge(t *testing.T, rt *worker.Runtime, connect mcpbridge.Connector, opts ...mcpbridge.Option) *mcpbridge.Bridge {
	t.Helper()
	opts = append([]mcpbridge.Option{mcpbridge.WithLogger(quiet), mcpbridge.WithBackoff(10*time.Millisecond, 200*time.Millisecond)}, opts...)
	b, err := mcpbridge.New(rt, connect, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func invoke(rt *worker.Runtime, method, params string, timeout time.Duration) (json.RawMessage, *schema.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	call := schema.Call{Request: schema.Request{ID: json.RawMessage("1"), Method: method}}
	if params != "" {
		call.Params = json.RawMessage(params)
	}
	return rt.Invoke(ctx, call, nil)
}

func TestBridgeServesTools(t *testing.T) {
	rt := newRuntime(t)
	connect, _ := inMemory(t, testServer())
	startBridge(t, rt, connect, mcpbridge.WithPrefix("ext"))

	want := []string{"ext.add", "ext.big", "ext.boom", "ext.count", "ext.greet", "ext.pair", "ext.plain", "ext.wait", "ext.weird_name_"}
	if got := rt.Methods(); !slices.Equal(got, want) {
		t.Fatalf("Methods() = %v, want %v", got, want)
	}
	var add, pair schema.Descriptor
	for _, d := range rt.Descriptors() {
		switch d.Name {
		case "ext.add":
			add = d
		case "ext.pair":
			pair = d
		}
	}
	if string(pair.Result) != `{"type":"array"}` {
		t.Errorf("result schema of ext.pair = %s, want the wrapped value's {\"type\":\"array\"}", pair.Result)
	}
	if add.Description != "adds a and b" || !add.RetrySafe || add.Version != "0.1.0" || len(add.Params) == 0 || len(add.Result) == 0 {
		t.Errorf("descriptor of ext.add = %+v, want the tool's description, hints, version and schemas", add)
	}

	tests := []struct {
		name       string
		method     string
		params     string
		wantResult string
		wantErr    *schema.Error
	}{
		{"structured result", "ext.add", `{"a":2,"b":3}`, `{"sum":5}`, nil},
		{"text result", "ext.greet", `{"name":"ada"}`, `"hello, ada"`, nil},
		{"structured number", "ext.count", `{}`, `5`, nil},
		{"wrapped by the output schema", "ext.pair", `{}`, `[1, 2]`, nil},
		{"wrapped by _meta, every digit kept", "ext.big", `{}`, `12345678901234567890`, nil},
		{"an object like a wrapper stays an object", "ext.plain", `{}`, `{"result":"x"}`, nil},
		{"sanitized name", "ext.weird_name_", ``, `"ok"`, nil},
		{"tool error", "ext.boom", `{}`, ``, schema.ErrTool},
		{"positional params", "ext.greet", `["ada"]`, ``, schema.ErrInvalidParams},
		{"deadline", "ext.wait", `{}`, ``, schema.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := invoke(rt, tt.method, tt.params, time.Second)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s(%s) = %s, %v; want code %d", tt.method, tt.params, got, err, tt.wantErr.Code)
				}
				return
			}
			if err != nil || string(got) != tt.wantResult {
				t.Fatalf("%s(%s) = %s, %v; want %s", tt.method, tt.params, got, err, tt.wantResult)
			}
		})
	}
}

func TestBridgeReconnects(t *testing.T) {
	rt := newRuntime(t)
	connect, kill := inMemory(t, testServer())
	startBridge(t, rt, connect)

	kill()
	// Calls fail fast while the bridge reconnects, then succeed again.
	toolbustest.Eventually(t, func() bool {
		got, err := invoke(rt, "greet", `{"name":"again"}`, time.Second)
		if err == nil {
			if string(got) != `"hello, again"` {
				t.Fatalf("greet after reconnecting = %s, want hello, again", got)
			}
			return true
		}
		if !errors.Is(err, schema.ErrUnavailable) && !errors.Is(err, schema.ErrTool) {
			t.Fatalf("greet while reconnecting = %v, want unavailable", err)
		}
		return false
	}, "the bridge reconnects")
}

func TestBridgeOverStreamableHTTP(t *testing.T) {
	srv := testServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: quiet})
	ts := httptest.NewServer(h)
	defer ts.Close()
	rt := newRuntime(t)
	b := startBridge(t, rt, mcpbridge.URL(ts.URL, ts.Client()), mcpbridge.WithPrefix("web"))
	got, err := invoke(rt, "web.add", `{"a":1,"b":1}`, 5*time.Second)
	if err != nil || string(got) != `{"sum":2}` {
		t.Fatalf("web.add = %s, %v; want {\"sum\":2}", got, err)
	}
	b.Close()
	if _, err := invoke(rt, "web.add", `{"a":1,"b":1}`, 5*time.Second); !errors.Is(err, schema.ErrUnavailable) {
		t.Fatalf("web.add after Close = %v, want unavailable", err)
	}
}

func TestBridgeRestartsAStdioServer(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to build the test server")
	}
	bin := filepath.Join(t.TempDir(), "server")
	build := exec.Command("go", "build", "-o", bin, "./testdata/server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/server: %v\n%s", err, out)
	}
	rt := newRuntime(t)
	startBridge(t, rt, mcpbridge.Command(bin), mcpbridge.WithPrefix("local"))

	first, err := invoke(rt, "local.pid", "", 5*time.Second)
	if err != nil {
		t.Fatalf("local.pid = %v", err)
	}
	if _, err := invoke(rt, "local.crash", "", 5*time.Second); err == nil {
		t.Fatal("local.crash answered, want an error: its server exited")
	}
	toolbustest.Eventually(t, func() bool {
		got, err := invoke(rt, "local.pid", "", 5*time.Second)
		if err == nil && string(got) == string(first) {
			t.Fatalf("pid after the crash = %s, the same process as before", got)
		}
		return err == nil
	}, "the crashed server is started again")
	if got, err := invoke(rt, "local.greet", `{"name":"again"}`, 5*time.Second); err != nil || string(got) != `"hello, again"` {
		t.Fatalf("local.greet = %s, %v", got, err)
	}
}

func TestNewRefusesBackoffOutOfOrder(t *testing.T) {
	rt := newRuntime(t)
	never := func() mcp.Transport { return nil }
	_, err := mcpbridge.New(rt, never, mcpbridge.WithBackoff(time.Second, time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "backoff bounds must be positive and ordered, got 1s and 1ms") {
		t.Errorf("New with backoff 1s..1ms = %v, want the bounds named", err)
	}
}
