package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/schema"
)

// invalidParams returns the -32602 error of an rpc.jobs.* call whose member
// field is wrong.
func invalidParams(field, reason string) *schema.Error {
	field = schema.FieldPointer(field)
	data := map[string]string{"reason": reason}
	msg := "invalid params: " + reason
	if field != "" {
		data["field"] = field
		msg = "invalid params: " + field + ": " + reason
	}
	return schema.NewError(schema.CodeInvalidParams, msg, data)
}

// decodeParams decodes the by-name params of an rpc.jobs.* call into dst,
// refusing members dst does not have. Absent params decode as {}.
func decodeParams(raw json.RawMessage, dst any) *schema.Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return invalidParams("", "params must be an object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return invalidParams(schema.Pointer(strings.Split(typeErr.Field, ".")...), fmt.Sprintf("expected %s, got %s", jsonKind(typeErr.Type), typeErr.Value))
	}
	// encoding/json reports an unknown member only in its message, by
	// name: the pointer is that of the first member so named.
	if rest, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		name := strings.TrimSuffix(rest, `"`)
		return invalidParams(memberPointer(raw, name), "unknown field")
	}
	return invalidParams("", err.Error())
}

// jsonKind names the JSON value a Go type decodes from, for an error a
// person reads: "an object" rather than "jobs.submitMessage".
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Name() == "RawMessage" {
			return "a JSON value"
		}
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// memberPointer returns the JSON pointer of the first member named name
// in the object raw, looking at its own members first, then theirs,
// level by level; just the name when none is found.
func memberPointer(raw json.RawMessage, name string) string {
	type node struct {
		at  []string
		obj json.RawMessage
	}
	level := []node{{obj: raw}}
	for depth := 0; depth < 8 && len(level) > 0; depth++ {
		var next []node
		for _, n := range level {
			var members map[string]json.RawMessage
			if json.Unmarshal(n.obj, &members) != nil {
				continue
			}
			if _, ok := members[name]; ok {
				return schema.Pointer(append(n.at, name)...)
			}
			for _, k := range slices.Sorted(maps.Keys(members)) {
				if v := bytes.TrimSpace(members[k]); len(v) > 0 && v[0] == '{' {
					next = append(next, node{at: append(append([]string(nil), n.at...), k), obj: v})
				}
			}
		}
		level = next
	}
	return name
}
