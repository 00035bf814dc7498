package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
		return invalidParams(schema.Pointer(strings.Split(typeErr.Field, ".")...), fmt.Sprintf("expected %s, got %s", typeErr.Type, typeErr.Value))
	}
	// encoding/json reports an unknown member only in its message.
	if rest, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return invalidParams(strings.TrimSuffix(rest, `"`), "unknown field")
	}
	return invalidParams("", err.Error())
}
