package schema

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// EnvelopeVersion is the version of the bus protocol this package speaks.
const EnvelopeVersion = 1

// NATS header names of the bus protocol.
const (
	// HeaderDeadline carries the call's absolute deadline as decimal Unix
	// nanoseconds. A worker runs the handler with a context that ends then and
	// skips a call that is already late.
	HeaderDeadline = "Toolbus-Deadline"
	// HeaderTraceparent carries the W3C trace context of the call.
	HeaderTraceparent = "traceparent"
)

// CallEnvelope is the body of a call message on <prefix>.call.<method>: a
// msgpack map. ID and Params hold raw JSON bytes as the client sent them; ID
// is absent for a notification, which is also published without a reply
// subject.
type CallEnvelope struct {
	Version int    `msgpack:"v"`
	ID      []byte `msgpack:"id,omitempty"`
	Method  string `msgpack:"method"`
	Params  []byte `msgpack:"params,omitempty"`
	Caller  string `msgpack:"caller,omitempty"`
}

// ReplyEnvelope is the body of a worker's reply: a msgpack map with either
// Result (raw JSON) or Error.
type ReplyEnvelope struct {
	Version int            `msgpack:"v"`
	Result  []byte         `msgpack:"result,omitempty"`
	Error   *EnvelopeError `msgpack:"error,omitempty"`
}

// EnvelopeError is the error of a reply; Data holds raw JSON.
type EnvelopeError struct {
	Code    int    `msgpack:"code"`
	Message string `msgpack:"message"`
	Data    []byte `msgpack:"data,omitempty"`
}

// Errors of decoding an envelope.
var (
	// ErrEnvelopeVersion means the envelope's version is not one this
	// package reads.
	ErrEnvelopeVersion = errors.New("schema: unsupported envelope version")
	// ErrEmptyReply means a reply carries neither a result nor an error; it
	// never counts as success.
	ErrEmptyReply = errors.New("schema: reply has neither result nor error")
)

// MarshalCall encodes a call envelope.
func MarshalCall(c *CallEnvelope) ([]byte, error) {
	c.Version = EnvelopeVersion
	return msgpack.Marshal(c)
}

// UnmarshalCall decodes a call envelope. Unknown keys are ignored, so later
// versions can add members.
func UnmarshalCall(b []byte) (*CallEnvelope, error) {
	var c CallEnvelope
	if err := msgpack.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("schema: decode call envelope: %w", err)
	}
	if c.Version != EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d", ErrEnvelopeVersion, c.Version)
	}
	return &c, nil
}

// MarshalReply encodes a reply envelope.
func MarshalReply(r *ReplyEnvelope) ([]byte, error) {
	r.Version = EnvelopeVersion
	return msgpack.Marshal(r)
}

// UnmarshalReply decodes a reply envelope and checks that it carries exactly
// one of result and error.
func UnmarshalReply(b []byte) (*ReplyEnvelope, error) {
	var r ReplyEnvelope
	if err := msgpack.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("schema: decode reply envelope: %w", err)
	}
	if r.Version != EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d", ErrEnvelopeVersion, r.Version)
	}
	if len(r.Result) == 0 && r.Error == nil {
		return nil, ErrEmptyReply
	}
	return &r, nil
}

// ReplyResult returns the reply envelope of a result.
func ReplyResult(result []byte) *ReplyEnvelope {
	return &ReplyEnvelope{Version: EnvelopeVersion, Result: result}
}

// ReplyError returns the reply envelope of an error.
func ReplyError(e *Error) *ReplyEnvelope {
	return &ReplyEnvelope{Version: EnvelopeVersion, Error: &EnvelopeError{Code: e.Code, Message: e.Message, Data: e.Data}}
}

// Err returns the reply's error as an [*Error], or nil.
func (r *ReplyEnvelope) Err() *Error {
	if r.Error == nil {
		return nil
	}
	return &Error{Code: r.Error.Code, Message: r.Error.Message, Data: r.Error.Data}
}

// FormatDeadline formats a deadline for [HeaderDeadline].
func FormatDeadline(t time.Time) string {
	return strconv.FormatInt(t.UnixNano(), 10)
}

// ParseDeadline reads a [HeaderDeadline] value.
func ParseDeadline(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, fmt.Errorf("schema: invalid %s header %q", HeaderDeadline, s)
	}
	return time.Unix(0, n), nil
}
