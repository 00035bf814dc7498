package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/schema"
)

// Typed adapts a function of decoded params to a [Handler].
//
// The params are decoded into a P with encoding/json, rejecting members P
// does not have. Params that do not fit answer -32602 (invalid params) with
// data naming the offending member, {"field": "ms", "reason": "..."}; an error
// from P's own UnmarshalJSON that carries an [*schema.Error] is answered
// unchanged.
//
// Absent or null params decode as the zero P without running the decoder, as
// JSON-RPC allows params to be left out when a method takes none: with a
// struct P that is the same as {}, so a function whose members are required
// checks them itself (see [InvalidParams]).
//
// The function's result is returned as the call's result, its error as the
// call's error.
//
// The handler knows the JSON Schemas of P and R, which [Runtime.Handle]
// puts in the method's descriptor unless [Schema] or [Describe] gives
// others.
func Typed[P, R any](fn func(ctx context.Context, params P) (R, error)) Handler {
	return &typed[P, R]{fn: fn}
}

// InvalidParams returns the -32602 error a tool answers when a member of its
// params is wrong: data names the member and says why.
func InvalidParams(field, reason string) *schema.Error {
	data := map[string]string{"reason": reason}
	msg := "invalid params: " + reason
	if field != "" {
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
		return InvalidParams(typeErr.Field, fmt.Sprintf("expected %s, got %s", typeErr.Type, typeErr.Value))
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return InvalidParams("", "invalid JSON: "+syntaxErr.Error())
	}
	// encoding/json reports an unknown member with an unexported error type,
	// so its message is the only place the member's name can be read from.
	if rest, ok := strings.CutPrefix(err.Error(), unknownFieldPrefix); ok {
		return InvalidParams(strings.TrimSuffix(rest, `"`), "unknown field")
	}
	return InvalidParams("", err.Error())
}
