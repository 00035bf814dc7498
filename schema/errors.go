package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// JSON-RPC 2.0 codes and the codes toolbus reserves in -32099..-32000.
// Tools may answer with codes of their own; those pass through unchanged.
const (
	CodeParseError     = -32700 // the body is not valid JSON
	CodeInvalidRequest = -32600 // the JSON is not a valid request object
	CodeMethodNotFound = -32601 // no such method, an invalid method name, or no worker serves it
	CodeInvalidParams  = -32602 // the params do not fit the method
	CodeInternal       = -32603 // a failure inside toolbus or a worker panic

	CodeToolError     = -32000 // a tool failed without a code of its own
	CodeTimeout       = -32001 // the call missed its deadline; retryable
	CodeOverloaded    = -32002 // overloaded or rate limited; see data.retry_after_ms
	CodeUnavailable   = -32003 // a known method has no healthy worker now; retryable
	CodeCanceled      = -32004 // the call was canceled
	CodeForbidden     = -32005 // the caller may not call this method
	CodeLimitExceeded = -32006 // a configured limit was exceeded; data.limit names it
	CodeJobNotFound   = -32007 // rpc.jobs.*: no job has this id for this caller (never existed, or expired); data.id
)

// Error is a JSON-RPC 2.0 error object. It implements error, so any layer can
// return it and [ErrorFrom] recovers it through wrapping.
//
// Data holds raw JSON (an object in every error toolbus makes); a tool's own
// data passes through byte for byte.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

var _ error = (*Error)(nil)

// Sentinel errors, one per toolbus code. They match any [*Error] with the same
// code under [errors.Is], so errors.Is(err, schema.ErrTimeout) holds for every
// timeout whatever its message or data.
var (
	ErrParse          = &Error{Code: CodeParseError, Message: "parse error"}
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrMethodNotFound = &Error{Code: CodeMethodNotFound, Message: "method not found"}
	ErrInvalidParams  = &Error{Code: CodeInvalidParams, Message: "invalid params"}
	ErrInternal       = &Error{Code: CodeInternal, Message: "internal error"}
	ErrTool           = &Error{Code: CodeToolError, Message: "tool error"}
	ErrTimeout        = &Error{Code: CodeTimeout, Message: "timed out"}
	ErrOverloaded     = &Error{Code: CodeOverloaded, Message: "overloaded"}
	ErrUnavailable    = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrCanceled       = &Error{Code: CodeCanceled, Message: "canceled"}
	ErrForbidden      = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrLimitExceeded  = &Error{Code: CodeLimitExceeded, Message: "limit exceeded"}
	ErrJobNotFound    = &Error{Code: CodeJobNotFound, Message: "job not found"}
)

// Error returns the code and message, for logs.
func (e *Error) Error() string {
	return "jsonrpc error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// Is reports whether target is an [*Error] with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Code == e.Code
}

// NewError returns an error with the given code and message. A non-nil data
// is marshalled to JSON; a json.RawMessage is used as it is. Data that cannot
// be marshalled is replaced by an object that says why, so an error is never
// lost on its way.
func NewError(code int, message string, data any) *Error {
	e := &Error{Code: code, Message: message}
	if data != nil {
		e.Data = marshalData(data)
	}
	return e
}

// Errorf returns an error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithData returns a copy of e carrying data, marshalled as by [NewError].
func (e *Error) WithData(data any) *Error {
	c := *e
	c.Data = marshalData(data)
	return &c
}

func marshalData(data any) json.RawMessage {
	if raw, ok := data.(json.RawMessage); ok {
		if len(raw) == 0 || json.Valid(raw) {
			return raw
		}
		b, _ := json.Marshal(map[string]string{"data_error": "data is not valid JSON"})
		return b
	}
	b, err := json.Marshal(data)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"data_error": err.Error()})
	}
	return b
}

// LimitError reports that a configured limit was exceeded. limit is the name
// an operator sets (for example "max_batch_items"); got is what was seen, or
// -1 when it is not known exactly (a body cut off at its limit). For the
// limits every front door of the ingress holds a request to (max_body_bytes,
// max_batch_items, max_depth) the message also says what the caller can do
// and names the ingress flag that raises the limit; data is the same for
// every limit.
func LimitError(limit string, max, got int64) *Error {
	data := map[string]any{"limit": limit, "max": max}
	msg := fmt.Sprintf("limit exceeded: %s is %d", limit, max)
	if got >= 0 {
		data["got"] = got
		msg = fmt.Sprintf("limit exceeded: %s is %d, got %d", limit, max, got)
	}
	if fix := raiseLimit(limit); fix != "" {
		msg += "; " + fix
	}
	return NewError(CodeLimitExceeded, msg, data)
}

// raiseLimit returns what a caller can do about one of the ingress's
// request limits, and the flag of toolbus ingress and toolbus dev that
// raises it; "" for any other limit.
func raiseLimit(limit string) string {
	switch limit {
	case "max_body_bytes":
		return "send a smaller body, or raise the limit with --max-body-bytes"
	case "max_batch_items":
		return "split the batch, or raise the limit with --max-batch-items"
	case "max_depth":
		return "nest the JSON less deeply, or raise the limit with --max-depth"
	}
	return ""
}

// ErrorFrom maps any error to the [*Error] it answers with: an [*Error]
// anywhere in the chain is returned as it is, a context deadline becomes a
// retryable [CodeTimeout], a context cancellation [CodeCanceled], and anything
// else [CodeInternal] carrying the error text. ErrorFrom(nil) is nil.
func ErrorFrom(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return NewError(CodeTimeout, "timed out: "+err.Error(), map[string]any{"retryable": true})
	case errors.Is(err, context.Canceled):
		return NewError(CodeCanceled, "canceled: "+err.Error(), nil)
	}
	return NewError(CodeInternal, "internal error: "+err.Error(), nil)
}
