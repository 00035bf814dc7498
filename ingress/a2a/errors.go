package a2a

import (
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// a2aError returns the A2A error of a toolbus JSON-RPC error e. A2A
// defines its own meanings for -32001…-32007, which overlap toolbus's, so
// on /a2a each toolbus code becomes the A2A error that says the same; the
// toolbus message and code travel in the A2A error's data.error:
//
//	-32700, -32600, -32602, -32603   the same JSON-RPC codes
//	-32602 for a finished job         -32002 task not cancelable
//	-32007 job not found              -32001 task not found
//	-32601 method not found           -32601 method not found
//	-32005 forbidden                  -32600 invalid request
//	-32000…-32006 otherwise           -32000 server error (timeout,
//	                                  overloaded, unavailable, canceled,
//	                                  limit): the message says whether
//	                                  and when to retry
//	any other code                    -32603 internal error
func a2aError(e *schema.Error) error {
	var sentinel error
	switch e.Code {
	case schema.CodeParseError:
		sentinel = a2a.ErrParseError
	case schema.CodeInvalidRequest:
		sentinel = a2a.ErrInvalidRequest
	case schema.CodeMethodNotFound:
		sentinel = a2a.ErrMethodNotFound
	case schema.CodeInvalidParams:
		sentinel = a2a.ErrInvalidParams
		if reason(e) == schema.ReasonJobFinished {
			sentinel = a2a.ErrTaskNotCancelable
		}
	case schema.CodeJobNotFound:
		sentinel = a2a.ErrTaskNotFound
	case schema.CodeForbidden:
		sentinel = a2a.ErrInvalidRequest
	case schema.CodeToolError, schema.CodeTimeout, schema.CodeOverloaded, schema.CodeUnavailable,
		schema.CodeCanceled, schema.CodeLimitExceeded:
		sentinel = a2a.ErrServerError
	default:
		sentinel = a2a.ErrInternalError
	}
	return refuse(sentinel, "%s (toolbus code %d)", e.Message, e.Code)
}

// sentenceError is an A2A error whose text is toolbus's sentence alone. The SDK
// answers it with the code of kind and puts its text in data.error beside
// kind's own message, which a wrapping "%w" would repeat at its end.
type sentenceError struct {
	msg  string
	kind error
}

func (r *sentenceError) Error() string { return r.msg }

func (r *sentenceError) Unwrap() error { return r.kind }

// refuse returns the A2A error of kind (an a2a.Err… sentinel) with the
// sentence format makes of args.
func refuse(kind error, format string, args ...any) error {
	return &sentenceError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// reason returns data.reason of e, or "".
func reason(e *schema.Error) string {
	var d struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Reason
}
