package toolbustest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

type sumParams struct {
	A int `json:"a"`
	B int `json:"b"`
}

// mathTools registers math.add, counting the calls that reach it.
func mathTools(calls *atomic.Int64) func(rt *worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		return rt.Handle("math.add", worker.Typed(func(_ context.Context, p sumParams) (int, error) {
			calls.Add(1)
			return p.A + p.B, nil
		}), worker.Describe(schema.Descriptor{Description: "adds a and b", RetrySafe: true}))
	}
}

// discover calls rpc.discover and decodes the document.
func discover(t *testing.T, c *toolbustest.Cluster) discovery.OpenRPC {
	t.Helper()
	r := c.Call(t, discovery.Method, "")
	if r.Error != nil {
		t.Fatalf("rpc.discover = %v", r.Error)
	}
	var doc discovery.OpenRPC
	if err := json.Unmarshal(r.Result, &doc); err != nil {
		t.Fatalf("rpc.discover result %s: %v", r.Result, err)
	}
	return doc
}

// workersOf returns how many workers the registry counts for method.
func workersOf(reg *discovery.Registry, method string) int {
	t, ok := reg.Lookup(method)
	if !ok {
		return 0
	}
	return t.Workers
}

func TestDiscoveryFollowsWorkers(t *testing.T) {
	var calls atomic.Int64
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithoutWorker())
	reg := c.Registry

	w1 := c.AddWorker(t, mathTools(&calls))
	toolbustest.Eventually(t, func() bool { return workersOf(reg, "math.add") == 1 }, "the first worker's tool appears")
	doc := discover(t, c)
	if len(doc.Methods) != 1 || doc.Methods[0].Name != "math.add" || doc.Methods[0].Description != "adds a and b" || !doc.Methods[0].X.RetrySafe {
		t.Fatalf("rpc.discover methods = %+v, want math.add described", doc.Methods)
	}

	w2 := c.AddWorker(t, mathTools(&calls))
	toolbustest.Eventually(t, func() bool { return workersOf(reg, "math.add") == 2 }, "a second worker is counted")

	w1.Kill() // no goodbye: it goes when it misses its announcements
	toolbustest.Eventually(t, func() bool { return workersOf(reg, "math.add") == 1 }, "a killed worker is forgotten")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w2.Runtime.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	toolbustest.Eventually(t, func() bool { return workersOf(reg, "math.add") == 0 }, "a worker that shuts down is dropped")

	tests := []struct {
		name   string
		method string
		want   *schema.Error
	}{
		{"known method without workers", "math.add", schema.ErrUnavailable},
		{"method never advertised", "math.never", schema.ErrMethodNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.Call(t, tt.method, `{"a":1,"b":2}`)
			if !errors.Is(r.Error, tt.want) {
				t.Fatalf("%s = %v, want code %d", tt.method, r.Error, tt.want.Code)
			}
			if tt.want == schema.ErrUnavailable && !bytes.Contains(r.Error.Data, []byte(`"retryable":true`)) {
				t.Errorf("data = %s, want retryable", r.Error.Data)
			}
		})
	}
	if got := len(discover(t, c).Methods); got != 0 {
		t.Errorf("rpc.discover lists %d methods with no worker left, want 0", got)
	}
}

func TestValidationAtTheIngress(t *testing.T) {
	var calls atomic.Int64
	tests := []struct {
		name       string
		validate   bool
		params     string
		wantField  string
		wantSource string // "schema" when the ingress refused, "" when the worker did
		wantErr    bool
	}{
		{"valid params", true, `{"a":1,"b":2}`, "", "", false},
		{"wrong type", true, `{"a":"one","b":2}`, "/a", "schema", true},
		{"unknown member", true, `{"a":1,"b":2,"c":2}`, "/c", "schema", true},
		{"validation off: the worker refuses", false, `{"a":"one","b":2}`, "/a", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls.Store(0)
			c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(mathTools(&calls)),
				toolbustest.WithGateway(func(c *node.GatewayConfig) {
					c.ValidateParams = tt.validate
				}))
			toolbustest.Eventually(t, func() bool { return workersOf(c.Registry, "math.add") == 1 }, "math.add appears")
			r := c.Call(t, "math.add", tt.params)
			if !tt.wantErr {
				if r.Error != nil || string(r.Result) != "3" || calls.Load() != 1 {
					t.Fatalf("math.add(%s) = %s %v after %d runs, want 3 from one run", tt.params, r.Result, r.Error, calls.Load())
				}
				return
			}
			if !errors.Is(r.Error, schema.ErrInvalidParams) {
				t.Fatalf("math.add(%s) = %v, want invalid params", tt.params, r.Error)
			}
			if got := calls.Load(); got != 0 {
				t.Errorf("the tool ran %d times, want 0", got)
			}
			var data struct {
				Field, Reason, Source string
			}
			if err := json.Unmarshal(r.Error.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.Source != tt.wantSource || data.Reason == "" || (tt.wantField != "" && data.Field != tt.wantField) {
				t.Errorf("data = %s, want field %q, a reason and source %q", r.Error.Data, tt.wantField, tt.wantSource)
			}
		})
	}
}

// announce publishes a hand-written announcement on subject, as a worker
// in another language would.
func announce(t *testing.T, c *toolbustest.Cluster, subject, body string) {
	t.Helper()
	nc, err := c.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// announceSubject returns the subject on which method is announced.
func announceSubject(t *testing.T, method string) string {
	t.Helper()
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	subject, err := s.AnnounceMethod(method)
	if err != nil {
		t.Fatal(err)
	}
	return subject
}

func TestBrokenAndConflictingDescriptors(t *testing.T) {
	var calls atomic.Int64
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(mathTools(&calls)))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("math.add"); return ok }, "the Go worker's math.add is listed")
	// One worker advertises a good tool next to a broken one and one of
	// a reserved name; another disagrees with the Go worker, which came
	// first, on math.add's schema; a third announces a tool on another's
	// subject.
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	announce(t, c, announceSubject(t, "py.ok"), `{"v":1,"worker":"py-1","interval_ms":60000,"tools":[{"name":"py.ok","params":{"type":"object"}}]}`)
	announce(t, c, announceSubject(t, "py.bad"), `{"v":1,"worker":"py-1","interval_ms":60000,"tools":[{"name":"py.bad","params":{"type":5}}]}`)
	announce(t, c, s.Announce()+".rpc.x", `{"v":1,"worker":"py-1","interval_ms":60000,"tools":[{"name":"rpc.x"}]}`)
	announce(t, c, announceSubject(t, "math.add"), `{"v":1,"worker":"py-2","interval_ms":60000,"tools":[{"name":"math.add","params":{"type":"array"}}]}`)
	announce(t, c, announceSubject(t, "py.other"), `{"v":1,"worker":"py-3","interval_ms":60000,"tools":[{"name":"echo.stolen"}]}`)
	announce(t, c, announceSubject(t, "py.junk"), `not even json`)

	toolbustest.Eventually(t, func() bool {
		tool, _ := c.Registry.Lookup("math.add")
		_, ok := c.Registry.Lookup("py.ok")
		return ok && tool.Conflict
	}, "the good tools and the conflict are listed")
	doc := discover(t, c)
	kinds := map[string]string{}
	for _, p := range doc.Problems {
		kinds[p.Method] = p.Kind
	}
	want := map[string]string{"py.bad": discovery.ProblemBroken, "rpc.x": discovery.ProblemBroken, "math.add": discovery.ProblemConflict}
	for m, k := range want {
		if kinds[m] != k {
			t.Errorf("problem of %q = %q, want %q (problems %+v)", m, kinds[m], k, doc.Problems)
		}
	}
	for _, m := range []string{"py.bad", "echo.stolen", "py.other"} {
		if _, ok := c.Registry.Lookup(m); ok {
			t.Errorf("%s is listed, want it left out", m)
		}
	}
	// The conflict changes nothing: the Go worker's descriptor stays in
	// force, and a call that breaks it never reaches a worker.
	if r := c.Call(t, "math.add", `{"a":2,"b":3}`); r.Error != nil || string(r.Result) != "5" {
		t.Errorf("math.add = %s %v, want 5", r.Result, r.Error)
	}
	before := calls.Load()
	if r := c.Call(t, "math.add", `[2,3]`); !errors.Is(r.Error, schema.ErrInvalidParams) {
		t.Errorf("math.add([2,3]) = %s %v, want -32602 from the Go worker's schema, which the newcomer's does not replace", r.Result, r.Error)
	}
	if got := calls.Load(); got != before {
		t.Errorf("the tool ran %d more times, want 0", got-before)
	}
}

func TestOlderWorkersAnnounceOnTheSharedSubject(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithoutWorker())
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	announce(t, c, s.Announce(), `{"v":1,"worker":"old-1","interval_ms":60000,"tools":[{"name":"old.a"},{"name":"old.b"}]}`)
	toolbustest.Eventually(t, func() bool {
		_, a := c.Registry.Lookup("old.a")
		_, b := c.Registry.Lookup("old.b")
		return a && b
	}, "an older worker's tools are listed")
	announce(t, c, s.Announce(), `{"v":1,"worker":"old-1","interval_ms":60000,"leaving":true,"tools":[]}`)
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("old.a"); return !ok }, "the older worker's tools go when it leaves")
}

func TestOpenRPCDocument(t *testing.T) {
	var calls atomic.Int64
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(toolbustest.Demo), toolbustest.WithTools(mathTools(&calls)))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("math.add"); return ok }, "tools appear")

	resp, err := http.Get(c.BaseURL + "/openrpc.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openrpc.json = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	meta, err := os.Open("testdata/openrpc-1.3-structure.json")
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	metaDoc, err := jsonschema.UnmarshalJSON(meta)
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("toolbus:///openrpc-meta.json", metaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("toolbus:///openrpc-meta.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("the OpenRPC document breaks the meta-schema: %v\n%s", err, body)
	}

	var doc discovery.OpenRPC
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range doc.Methods {
		cds := append([]discovery.ContentDescriptor{m.Result}, m.Params...)
		for _, cd := range cds {
			sc := jsonschema.NewCompiler()
			d, err := jsonschema.UnmarshalJSON(bytes.NewReader(cd.Schema))
			if err == nil {
				err = sc.AddResource("toolbus:///s.json", d)
			}
			if err == nil {
				_, err = sc.Compile("toolbus:///s.json")
			}
			if err != nil {
				t.Errorf("method %s, %s: schema %s does not compile: %v", m.Name, cd.Name, cd.Schema, err)
			}
		}
	}
	// The same document over JSON-RPC, on every transport that routes
	// through the dispatcher.
	if got := discover(t, c); len(got.Methods) != len(doc.Methods) {
		t.Errorf("rpc.discover has %d methods, GET /openrpc.json %d", len(got.Methods), len(doc.Methods))
	}
}
