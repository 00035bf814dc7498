package worker

import (
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
// idempotent, whether it may ask its caller a question (d.Asks, as
// [Asks] sets it), and its version. d.Name is ignored (the
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

// Asks declares that the method may ask its caller a question while it
// runs ([Ask]): its descriptor says "asks": true, so that front doors run
// it where a question can be answered (as a job, an A2A task, an MCP call
// of a session that can elicit) and agents know that a synchronous call
// of it may fail for want of an answer. It is the same as Describe with
// Asks set.
func Asks() HandleOption {
	return Describe(schema.Descriptor{Asks: true})
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
	base.Asks = base.Asks || over.Asks
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

// inferSchema returns the JSON Schema of the values of t as the typed
// adapter decodes them, by the rules of jsonschema-go: a struct field
// without omitempty or omitzero in its json tag is required. A type with
// JSON methods of its own reads and writes JSON its struct does not show,
// so its schema is {}; when t itself is one, it has no schema.
func inferSchema(t reflect.Type) (*jsonschema.Schema, error) {
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
	return s, nil
}

// encodeSchema returns s as JSON with its members in a stable order, or
// nil when s is nil.
func encodeSchema(s *jsonschema.Schema) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("worker: encode a schema: %w", err)
	}
	// A round trip through a map sorts the members, so that the same
	// type always announces the same bytes.
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("worker: encode a schema: %w", err)
	}
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
