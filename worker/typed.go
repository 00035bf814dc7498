package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolbus/toolbus/schema"
)

// Typed adapts a function of decoded params to a [Handler].
//
// The params are decoded into a P with encoding/json, rejecting members P
// does not have. A struct field whose json tag has neither omitempty nor
// omitzero is required, by the rule of the JSON Schema Typed derives
// (github.com/google/jsonschema-go): params without it are answered -32602
// naming it, {"field": "/text", "reason": "required member is missing"},
// also when the ingress does not validate params, so that a missing member
// never reaches fn as its zero value. Mark a field that may be left out
// with omitempty (`json:"unique,omitempty"`), or give it a pointer type to
// tell absent from zero. The same holds inside nested structs, slices and
// maps of structs.
//
// Params that do not fit answer -32602 (invalid params) with data naming
// the offending member as a JSON pointer, {"field": "/ms", "reason":
// "..."}; an error from P's own UnmarshalJSON that carries an
// [*schema.Error] is answered unchanged. A type with JSON methods of its
// own decodes as it says, and Typed requires nothing of it.
//
// Absent or null params are decoded as {} would be when P is a struct, so
// a struct with required members answers -32602 for them, and as the zero
// P otherwise: JSON-RPC allows params to be left out when a method takes
// none.
//
// The function's result is returned as the call's result, its error as the
// call's error.
//
// The handler knows the JSON Schemas of P and R, which [Runtime.Handle]
// puts in the method's descriptor unless [Schema] or [Describe] gives
// others; the required members stay required whatever schema is announced.
func Typed[P, R any](fn func(ctx context.Context, params P) (R, error)) Handler {
	t := &typed[P, R]{fn: fn}
	if s, err := inferSchema(reflect.TypeFor[P]()); err == nil {
		t.params, _ = encodeSchema(s)
		t.need = requirementsOf(s)
	}
	if s, err := inferSchema(reflect.TypeFor[R]()); err == nil {
		t.result, _ = encodeSchema(s)
	}
	return t
}

// typed is the handler [Typed] makes: it decodes params into a P, checks
// that they hold P's required members, and knows the JSON Schemas of P
// and R.
type typed[P, R any] struct {
	fn             func(ctx context.Context, params P) (R, error)
	params, result json.RawMessage
	// need is what params must hold; nil when P requires nothing.
	need *requirements
}

var _ describer = (*typed[int, int])(nil)

// ServeCall implements [Handler].
func (t *typed[P, R]) ServeCall(ctx context.Context, req *Request) (any, error) {
	var p P
	if err := decodeParams(req.Params, &p); err != nil {
		return nil, err
	}
	if t.need != nil {
		params := bytes.TrimSpace(req.Params)
		if len(params) == 0 || bytes.Equal(params, []byte("null")) {
			params = []byte("{}")
		}
		if err := t.need.check(params, ""); err != nil {
			return nil, err
		}
	}
	return t.fn(ctx, p)
}

// schemas implements describer.
func (t *typed[P, R]) schemas() (params, result json.RawMessage) {
	return t.params, t.result
}

// requirements is what a JSON value must hold by a schema's "required"
// lists: the members of an object that must be present, and the
// requirements of the values inside it. It is read from the schema
// inferred for a type, so the decoder and the announced schema follow one
// rule.
type requirements struct {
	// members must each be present in the object.
	members []string
	// props are the members whose own values have requirements, in the
	// order of the struct's fields.
	props []propRequirements
	// items is what each element of an array must hold.
	items *requirements
	// values is what each value of a map must hold.
	values *requirements
}

type propRequirements struct {
	name string
	need *requirements
}

// requirementsOf returns what a value of schema s must hold, or nil when s
// requires nothing anywhere.
func requirementsOf(s *jsonschema.Schema) *requirements {
	if s == nil {
		return nil
	}
	r := &requirements{members: slices.Clone(s.Required)}
	names := s.PropertyOrder
	if len(names) == 0 {
		for name := range s.Properties {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	for _, name := range names {
		if need := requirementsOf(s.Properties[name]); need != nil {
			r.props = append(r.props, propRequirements{name: name, need: need})
		}
	}
	r.items = requirementsOf(s.Items)
	r.values = requirementsOf(s.AdditionalProperties)
	if len(r.members) == 0 && len(r.props) == 0 && r.items == nil && r.values == nil {
		return nil
	}
	return r
}

// check returns the -32602 error naming the first member raw lacks, at
// the JSON pointer at, or nil. A value of another kind than the
// requirements describe (null for a pointer left nil) has nothing to
// check: decoding already judged its type.
func (r *requirements) check(raw json.RawMessage, at string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		for _, name := range r.members {
			if _, ok := obj[name]; !ok {
				return InvalidParams(at+schema.Pointer(name), "required member is missing")
			}
		}
		for _, p := range r.props {
			if v, ok := obj[p.name]; ok {
				if err := p.need.check(v, at+schema.Pointer(p.name)); err != nil {
					return err
				}
			}
		}
		if r.values != nil {
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if err := r.values.check(obj[k], at+schema.Pointer(k)); err != nil {
					return err
				}
			}
		}
	case '[':
		if r.items == nil {
			return nil
		}
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil
		}
		for i, v := range elems {
			if err := r.items.check(v, at+schema.Pointer(strconv.Itoa(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

// InvalidParams returns the -32602 error a tool answers when a member of its
// params is wrong: data names the member and says why. field is a JSON
// pointer into the params ("/items/0/name"), or the name of one member of
// the params object, which becomes the pointer to it ("ms" is "/ms"; see
// [schema.FieldPointer]); "" names no member.
func InvalidParams(field, reason string) *schema.Error {
	data := map[string]string{"reason": reason}
	msg := "invalid params: " + reason
	if field = schema.FieldPointer(field); field != "" {
		data["field"] = field
		msg = "invalid params: " + field + ": " + reason
	}
	return schema.NewError(schema.CodeInvalidParams, msg, data)
}

func decodeParams(params json.RawMessage, dst any) error {
	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return paramsError(err)
	}
	if dec.More() {
		return InvalidParams("", "unexpected data after the params value")
	}
	return nil
}

const unknownFieldPrefix = `json: unknown field "`

// paramsError turns a decoding error into a -32602 naming the member where
// encoding/json tells which one it is.
func paramsError(err error) error {
	var rpcErr *schema.Error
	if errors.As(err, &rpcErr) {
		return err
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		// encoding/json names a nested member by the path of member
		// names from the params, joined with dots.
		field := ""
		if typeErr.Field != "" {
			field = schema.Pointer(strings.Split(typeErr.Field, ".")...)
		}
		return InvalidParams(field, fmt.Sprintf("expected %s, got %s", typeErr.Type, typeErr.Value))
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return InvalidParams("", "invalid JSON: "+syntaxErr.Error())
	}
	// encoding/json reports an unknown member with an unexported error type,
	// so its message is the only place the member's name can be read from.
	if rest, ok := strings.CutPrefix(err.Error(), unknownFieldPrefix); ok {
		return InvalidParams(schema.Pointer(strings.TrimSuffix(rest, `"`)), "unknown field")
	}
	return InvalidParams("", err.Error())
}
