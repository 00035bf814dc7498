package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Describe gives the descriptor a method advertises in discovery: its
// description, params and result schemas, timeout, whether it is
// idempotent or job-capable, and its version. d.Name is ignored (the
// pattern the method is registered under is its name); schemas left empty
// are derived from the Go types when the handler is made with [Typed].
// d.RetrySafe also marks the method [RetrySafe]. The descriptor must pass
// [schema.Descriptor.Validate] and stay within the limits listeners hold
// announcements to ([bus.CheckDescriptorLimits]): a description of at
// most [bus.MaxDescriptionBytes], for one.
func Describe(d schema.Descriptor) HandleOption {
	return func(c *handleConfig) error {
		d.Name = "x" // checked under its real name by Handle
		if err := d.Validate(); err != nil {
			return err
		}
		if err := bus.CheckDescriptorLimits(d); err != nil {
			return err
		}
		c.desc = mergeDescriptor(c.desc, d)
		if d.RetrySafe {
			c.retrySafe = true
		}
		return nil
	}
}

// Schema gives a method's params and result JSON Schemas by hand, in place
// of those [Typed] derives; either may be nil to keep the derived one (or
// to advertise none).
func Schema(params, result json.RawMessage) HandleOption {
	return Describe(schema.Descriptor{Params: params, Result: result})
}

// mergeDescriptor returns base with what over sets.
func mergeDescriptor(base, over schema.Descriptor) schema.Descriptor {
	if over.Description != "" {
		base.Description = over.Description
	}
	if len(over.Params) > 0 {
		base.Params = slices.Clone(over.Params)
	}
	if len(over.Result) > 0 {
		base.Result = slices.Clone(over.Result)
	}
	if over.TimeoutMS > 0 {
		base.TimeoutMS = over.TimeoutMS
	}
	base.RetrySafe = base.RetrySafe || over.RetrySafe
	if over.Version != "" {
		base.Version = over.Version
	}
	return base
}

// describer is a handler that knows its own schemas, as [Typed] does.
type describer interface {
	schemas() (params, result json.RawMessage)
}

// descriptor returns the descriptor of a route being registered: what the
// options said, completed with the schemas h derives.
func descriptor(pattern string, h Handler, hc handleConfig) schema.Descriptor {
	d := hc.desc
	d.Name = pattern
	d.RetrySafe = d.RetrySafe || hc.retrySafe
	if ds, ok := h.(describer); ok {
		params, result := ds.schemas()
		if len(d.Params) == 0 {
			d.Params = params
		}
		if len(d.Result) == 0 {
			d.Result = result
		}
	}
	return d
}

// Descriptors returns the descriptor of every registered method, sorted by
// name: what the runtime advertises in discovery (see [WithAnnounce]).
func (rt *Runtime) Descriptors() []schema.Descriptor {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	ds := make([]schema.Descriptor, len(rt.routes))
	for i, r := range rt.routes {
		ds[i] = r.desc
	}
	slices.SortFunc(ds, func(a, b schema.Descriptor) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return ds
}

// typed is the handler [Typed] makes: it decodes params into a P and knows
// the JSON Schemas of P and R.
type typed[P, R any] struct {
	fn func(ctx context.Context, params P) (R, error)
}

var _ describer = (*typed[int, int])(nil)

// ServeCall implements [Handler].
func (t *typed[P, R]) ServeCall(ctx context.Context, req *Request) (any, error) {
	var p P
	if err := decodeParams(req.Params, &p); err != nil {
		return nil, err
	}
	return t.fn(ctx, p)
}

// schemas derives the JSON Schemas of P and R. A type that has no JSON
// Schema (a channel, a func) gets none rather than a wrong one.
func (t *typed[P, R]) schemas() (params, result json.RawMessage) {
	params, _ = deriveSchema(reflect.TypeFor[P]())
	result, _ = deriveSchema(reflect.TypeFor[R]())
	return params, result
}

// rawTypes are types whose values are any JSON, so their schema is {}.
var rawTypes = []reflect.Type{
	reflect.TypeFor[json.RawMessage](),
	reflect.TypeFor[any](),
	reflect.TypeFor[map[string]any](),
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
)

// deriveSchema returns the JSON Schema of the values of t as the typed
// adapter decodes them. The adapter leaves a missing member at its zero
// value, so no member is required: the "required" lists the inference
// writes are removed, and a tool that needs a member says so with
// [Schema]. A type with JSON methods of its own reads and writes JSON its
// struct does not show, so its schema is {}; when t itself is one, it has
// no schema.
func deriveSchema(t reflect.Type) (json.RawMessage, error) {
	opts := &jsonschema.ForOptions{
		IgnoreInvalidTypes: true,
		TypeSchemas: map[reflect.Type]*jsonschema.Schema{
			reflect.TypeFor[time.Duration](): {Type: "integer"},
			reflect.TypeFor[time.Time]():     {Type: "string"},
		},
	}
	for _, rt := range rawTypes {
		if t == rt {
			return nil, errors.New("worker: any JSON value fits")
		}
		opts.TypeSchemas[rt] = &jsonschema.Schema{}
	}
	custom := map[reflect.Type]bool{}
	customJSON(t, custom, map[reflect.Type]bool{})
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	if custom[base] {
		return nil, errors.New("worker: the type reads or writes its own JSON")
	}
	for ct := range custom {
		if _, ok := opts.TypeSchemas[ct]; !ok {
			opts.TypeSchemas[ct] = &jsonschema.Schema{}
		}
	}
	s, err := jsonschema.ForType(t, opts)
	if err != nil {
		return nil, fmt.Errorf("worker: derive the schema of %s: %w", t, err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("worker: encode the schema of %s: %w", t, err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("worker: encode the schema of %s: %w", t, err)
	}
	dropRequired(v)
	return json.Marshal(v)
}

// customJSON adds to found every type reachable from t (pointers taken
// off) that has a MarshalJSON or UnmarshalJSON method.
func customJSON(t reflect.Type, found, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if seen[t] {
		return
	}
	seen[t] = true
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) ||
		t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) {
		found[t] = true
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() || f.Anonymous {
				customJSON(f.Type, found, seen)
			}
		}
	case reflect.Slice, reflect.Array, reflect.Map:
		customJSON(t.Elem(), found, seen)
	}
}

// dropRequired removes "required" from the schema v and its subschemas.
func dropRequired(v any) {
	s, ok := v.(map[string]any)
	if !ok {
		return
	}
	delete(s, "required")
	for _, k := range []string{"properties", "patternProperties", "$defs", "definitions"} {
		if m, ok := s[k].(map[string]any); ok {
			for _, sub := range m {
				dropRequired(sub)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties", "additionalItems", "not"} {
		dropRequired(s[k])
	}
	for _, k := range []string{"prefixItems", "anyOf", "oneOf", "allOf"} {
		if l, ok := s[k].([]any); ok {
			for _, sub := range l {
				dropRequired(sub)
			}
		}
	}
}
