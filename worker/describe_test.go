package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

type addParams struct {
	A int    `json:"a" jsonschema:"the first addend"`
	B int    `json:"b,omitempty"`
	N string `json:"note,omitempty"`
}

type addResult struct {
	Sum int `json:"sum"`
}

// positional reads its own JSON, so its struct says nothing of it.
type positional struct{ X, Y int }

func (p *positional) UnmarshalJSON(b []byte) error {
	var xy [2]int
	if err := json.Unmarshal(b, &xy); err != nil {
		return err
	}
	p.X, p.Y = xy[0], xy[1]
	return nil
}

func add(_ context.Context, p addParams) (addResult, error) { return addResult{p.A + p.B}, nil }

// schemaOf returns a descriptor's schema decoded, or nil when it has none.
func schemaOf(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	return m
}

func TestDescriptors(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	rt := c.rt
	if err := rt.Handle("math.add", worker.Typed(add),
		worker.Describe(schema.Descriptor{Description: "adds two numbers", TimeoutMS: 500, Version: "1.2.0"})); err != nil {
		t.Fatal(err)
	}
	if err := rt.Handle("math.pair", worker.Typed(func(_ context.Context, p positional) (int, error) { return p.X, nil })); err != nil {
		t.Fatal(err)
	}
	byHand := json.RawMessage(`{"type":"object","required":["s"],"properties":{"s":{"type":"string"}}}`)
	if err := rt.Handle("text.upper", worker.Typed(func(_ context.Context, p map[string]any) (string, error) { return "", nil }),
		worker.Schema(byHand, nil), worker.RetrySafe()); err != nil {
		t.Fatal(err)
	}
	if err := rt.HandleFunc("raw.*", func(context.Context, *worker.Request) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}

	ds := rt.Descriptors()
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	if got, want := len(ds), 4; got != want {
		t.Fatalf("Descriptors() = %v, want 4 methods", names)
	}
	byName := map[string]schema.Descriptor{}
	for _, d := range ds {
		byName[d.Name] = d
	}

	t.Run("typed derives both schemas", func(t *testing.T) {
		d := byName["math.add"]
		if d.Description != "adds two numbers" || d.TimeoutMS != 500 || d.Version != "1.2.0" || d.RetrySafe {
			t.Errorf("math.add = %+v, want the described members", d)
		}
		p := schemaOf(t, d.Params)
		if p["type"] != "object" || p["additionalProperties"] != false {
			t.Errorf("params schema = %s, want a closed object", d.Params)
		}
		// a has no omitempty, b and note have: only a is required, by
		// the rule the decoder also holds params to.
		if req, _ := p["required"].([]any); len(req) != 1 || req[0] != "a" {
			t.Errorf("params schema = %s, want required [\"a\"]", d.Params)
		}
		props, _ := p["properties"].(map[string]any)
		a, _ := props["a"].(map[string]any)
		if a["type"] != "integer" || a["description"] != "the first addend" {
			t.Errorf("params property a = %v, want an integer with its description", a)
		}
		if r := schemaOf(t, d.Result); r["type"] != "object" {
			t.Errorf("result schema = %s, want an object", d.Result)
		}
	})
	t.Run("own JSON methods give no params schema", func(t *testing.T) {
		d := byName["math.pair"]
		if len(d.Params) != 0 {
			t.Errorf("math.pair params = %s, want none", d.Params)
		}
		if r := schemaOf(t, d.Result); r["type"] != "integer" {
			t.Errorf("math.pair result = %s, want integer", d.Result)
		}
	})
	t.Run("schema by hand wins", func(t *testing.T) {
		d := byName["text.upper"]
		if string(d.Params) != string(byHand) || !d.RetrySafe {
			t.Errorf("text.upper = %+v, want the hand schema and idempotent", d)
		}
		if !rt.RetrySafe("text.upper") {
			t.Errorf("RetrySafe(text.upper) = false, want true")
		}
	})
	t.Run("untyped handler has none", func(t *testing.T) {
		d := byName["raw.*"]
		if len(d.Params) != 0 || len(d.Result) != 0 {
			t.Errorf("raw.* = %+v, want no schemas", d)
		}
	})
}

func TestDescribeRefusesBadInput(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	tests := []struct {
		name string
		opt  worker.HandleOption
	}{
		{"params not a schema", worker.Schema(json.RawMessage(`[1]`), nil)},
		{"result not JSON", worker.Schema(nil, json.RawMessage(`{`))},
		{"negative timeout", worker.Describe(schema.Descriptor{TimeoutMS: -1})},
		{"description over the limit", worker.Describe(schema.Descriptor{Description: strings.Repeat("d", bus.MaxDescriptionBytes+1)})},
		{"version over the limit", worker.Describe(schema.Descriptor{Version: strings.Repeat("1", bus.MaxVersionBytes+1)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.rt.HandleFunc("x", func(context.Context, *worker.Request) (any, error) { return nil, nil }, tt.opt)
			if !errors.Is(err, schema.ErrBadDescriptor) {
				t.Errorf("Handle with %s = %v, want ErrBadDescriptor", tt.name, err)
			}
		})
	}
}
