package a2a

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// The methods of A2A's JSON-RPC binding whose params the front door
// checks before the SDK decodes them.
const (
	methodSend        = "message/send"
	methodStream      = "message/stream"
	methodGet         = "tasks/get"
	methodCancel      = "tasks/cancel"
	methodResubscribe = "tasks/resubscribe"
	methodPushSet     = "tasks/pushNotificationConfig/set"
	methodPushGet     = "tasks/pushNotificationConfig/get"
	methodPushList    = "tasks/pushNotificationConfig/list"
	methodPushDelete  = "tasks/pushNotificationConfig/delete"
)

// paramsError says which member of a request's params does not fit its
// method and why: Field is a JSON pointer into params ("" for params
// themselves).
type paramsError struct {
	Field  string
	Reason string
}

// checkParams checks params against the A2A 0.3 shape of method's params:
// members the method needs, the type of every member it reads, the kind
// of each part, a historyLength that is an integer of 0 or more. It
// returns nil for params that fit, and for a method it does not know (the
// SDK answers those -32601). The body is valid JSON by the time it runs,
// so a member's type is its first byte.
func checkParams(method string, params json.RawMessage) *paramsError {
	var check func(obj) *paramsError
	switch method {
	case methodSend, methodStream:
		check = checkSend
	case methodGet:
		check = func(o obj) *paramsError {
			return firstOf(o.str("id", true), o.count("historyLength"), o.object("metadata"))
		}
	case methodCancel, methodResubscribe, methodPushList:
		check = func(o obj) *paramsError { return firstOf(o.str("id", true), o.object("metadata")) }
	case methodPushGet:
		check = func(o obj) *paramsError {
			return firstOf(o.str("id", true), o.str("pushNotificationConfigId", false), o.object("metadata"))
		}
	case methodPushDelete:
		check = func(o obj) *paramsError {
			return firstOf(o.str("id", true), o.str("pushNotificationConfigId", true), o.object("metadata"))
		}
	case methodPushSet:
		check = func(o obj) *paramsError {
			return firstOf(o.str("taskId", true), o.nested("pushNotificationConfig", true, checkPushConfig))
		}
	default:
		return nil
	}
	params = bytes.TrimSpace(params)
	if len(params) == 0 {
		params = []byte("{}") // the members the method needs are missing
	}
	o, ok := newObj("", params)
	if !ok {
		return &paramsError{Field: "", Reason: "params must be an object"}
	}
	return check(o)
}

// checkSend checks the params of message/send and message/stream
// (MessageSendParams).
func checkSend(o obj) *paramsError {
	return firstOf(
		o.nested("message", true, checkMessage),
		o.nested("configuration", false, func(c obj) *paramsError {
			return firstOf(c.boolean("blocking"), c.count("historyLength"), c.strings("acceptedOutputModes"),
				c.nested("pushNotificationConfig", false, checkPushConfig))
		}),
		o.object("metadata"),
	)
}

// checkMessage checks a Message: kind "message" (which may be left out,
// as the SDK's own server allows), a messageId, a role of user or agent,
// an array of parts of the kinds text, file and data, and the types of
// its optional members.
func checkMessage(m obj) *paramsError {
	if e := m.str("kind", false); e != nil {
		return e
	}
	if k, ok, _ := m.member("kind", false); ok && unquote(k) != "message" {
		return m.fail("kind", `must be "message"`)
	}
	if e := firstOf(m.str("messageId", true), m.str("role", true)); e != nil {
		return e
	}
	if id := unquote(m.members["messageId"]); id == "" {
		return m.fail("messageId", "must not be empty")
	}
	if role := unquote(m.members["role"]); role != "user" && role != "agent" {
		return m.fail("role", `must be "user" or "agent"`)
	}
	return firstOf(
		m.array("parts", true, checkPart),
		m.str("contextId", false), m.str("taskId", false),
		m.strings("referenceTaskIds"), m.strings("extensions"),
		m.object("metadata"),
	)
}

// checkPart checks one part: a text part's text, a data part's data
// object, a file part's file with exactly one of bytes and uri.
func checkPart(p obj) *paramsError {
	if e := firstOf(p.str("kind", true), p.object("metadata")); e != nil {
		return e
	}
	switch kind := unquote(p.members["kind"]); kind {
	case "text":
		return p.str("text", true)
	case "data":
		return p.object("data", true)
	case "file":
		return p.nested("file", true, func(f obj) *paramsError {
			if e := firstOf(f.str("bytes", false), f.str("uri", false), f.str("name", false), f.str("mimeType", false)); e != nil {
				return e
			}
			hasBytes, hasURI := unquote(f.members["bytes"]) != "", unquote(f.members["uri"]) != ""
			if hasBytes == hasURI {
				return f.fail("", "must have either bytes or uri, not both")
			}
			return nil
		})
	default:
		return p.fail("kind", `must be "text", "file" or "data", not `+strconv.Quote(kind))
	}
}

// checkPushConfig checks a PushNotificationConfig.
func checkPushConfig(c obj) *paramsError {
	return firstOf(c.str("url", true), c.str("id", false), c.str("token", false),
		c.nested("authentication", false, func(a obj) *paramsError {
			return firstOf(a.strings("schemes", true), a.str("credentials", false))
		}))
}

// obj is one JSON object of params: its members and its JSON pointer.
type obj struct {
	at      string
	members map[string]json.RawMessage
}

func newObj(at string, raw json.RawMessage) (obj, bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return obj{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return obj{}, false
	}
	return obj{at: at, members: m}, true
}

// pointer returns the JSON pointer of member name of o.
func (o obj) pointer(name string) string {
	if name == "" {
		return o.at
	}
	return o.at + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

func (o obj) fail(name, reason string) *paramsError {
	return &paramsError{Field: o.pointer(name), Reason: reason}
}

// member returns member name, and whether it is there with a value
// other than null: JSON null stands for an optional member left out, as
// the SDK reads it.
func (o obj) member(name string, required bool) (json.RawMessage, bool, *paramsError) {
	v, ok := o.members[name]
	if !ok || string(v) == "null" {
		if required {
			return nil, false, o.fail(name, "is required")
		}
		return nil, false, nil
	}
	return v, true, nil
}

func (o obj) typed(name string, required bool, first byte, what string) *paramsError {
	v, ok, e := o.member(name, required)
	if e != nil || !ok {
		return e
	}
	if v[0] != first {
		return o.fail(name, "must be "+what)
	}
	return nil
}

func (o obj) str(name string, required bool) *paramsError {
	return o.typed(name, required, '"', "a string")
}

func (o obj) object(name string, required ...bool) *paramsError {
	return o.typed(name, len(required) > 0 && required[0], '{', "an object")
}

func (o obj) boolean(name string) *paramsError {
	v, ok, e := o.member(name, false)
	if e != nil || !ok {
		return e
	}
	if string(v) != "true" && string(v) != "false" {
		return o.fail(name, "must be true or false")
	}
	return nil
}

// count checks an optional member that must be an integer of 0 or more,
// written without a fraction or an exponent, as historyLength is.
func (o obj) count(name string) *paramsError {
	v, ok, e := o.member(name, false)
	if e != nil || !ok {
		return e
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return o.fail(name, "must be an integer of 0 or more")
	}
	return nil
}

// nested checks member name as an object with check.
func (o obj) nested(name string, required bool, check func(obj) *paramsError) *paramsError {
	v, ok, e := o.member(name, required)
	if e != nil || !ok {
		return e
	}
	inner, isObj := newObj(o.pointer(name), v)
	if !isObj {
		return o.fail(name, "must be an object")
	}
	return check(inner)
}

// array checks member name as an array of objects, each with check.
func (o obj) array(name string, required bool, check func(obj) *paramsError) *paramsError {
	v, ok, e := o.member(name, required)
	if e != nil || !ok {
		return e
	}
	var items []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return o.fail(name, "must be an array")
	}
	for i, it := range items {
		at := o.pointer(name) + "/" + strconv.Itoa(i)
		el, isObj := newObj(at, bytes.TrimSpace(it))
		if !isObj {
			return &paramsError{Field: at, Reason: "must be an object"}
		}
		if e := check(el); e != nil {
			return e
		}
	}
	return nil
}

// strings checks member name as an array of strings.
func (o obj) strings(name string, required ...bool) *paramsError {
	v, ok, e := o.member(name, len(required) > 0 && required[0])
	if e != nil || !ok {
		return e
	}
	var items []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return o.fail(name, "must be an array of strings")
	}
	for i, it := range items {
		if it = bytes.TrimSpace(it); len(it) == 0 || it[0] != '"' {
			return &paramsError{Field: o.pointer(name) + "/" + strconv.Itoa(i), Reason: "must be a string"}
		}
	}
	return nil
}

// unquote returns the string a JSON string literal holds, or "" for any
// other value.
func unquote(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func firstOf(errs ...*paramsError) *paramsError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
