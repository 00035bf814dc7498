package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
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
	// HeaderCallID carries a unique id of one call on the bus (not the
	// JSON-RPC id, which clients may repeat). A cancel message names the
	// call by it.
	HeaderCallID = "Toolbus-Call-Id"
)

// CallEnvelope is the body of a call message on <prefix>.call.<method>: a
// msgpack map. ID and Params hold raw JSON bytes as the client sent them; ID
// is absent for a notification, which is also published without a reply
// subject.
//
// The struct tags name the msgpack keys; [MarshalCall] and [UnmarshalCall]
// drive the msgpack library's streaming encoder and decoder member by member,
// without reflection, and the tests check that the library encoding the
// struct by its tags writes the very same bytes.
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
	// ErrInvalidReply means a reply breaks the protocol in another way: it
	// carries both a result and an error, or its result or error data is
	// not valid JSON. Such a reply is never passed on to the client.
	ErrInvalidReply = errors.New("schema: invalid reply")
	// ErrMalformedEnvelope means the bytes are not a msgpack map of the
	// shape PROTOCOL.md gives: truncated, trailing bytes, or a known key
	// holding a value of the wrong type.
	ErrMalformedEnvelope = errors.New("schema: malformed envelope")
)

// MarshalCall encodes a call envelope. The bytes are deterministic: the keys
// come in the order v, id, method, params, caller, and empty optional members
// are left out. The version written is always [EnvelopeVersion]; c is not
// modified.
func MarshalCall(c *CallEnvelope) ([]byte, error) {
	n := 2
	if len(c.ID) > 0 {
		n++
	}
	if len(c.Params) > 0 {
		n++
	}
	if c.Caller != "" {
		n++
	}
	w := newEncoder(16 + len(c.Method) + len(c.ID) + len(c.Params) + len(c.Caller) + 4*9)
	w.mapLen(n)
	w.str("v")
	w.int(EnvelopeVersion)
	if len(c.ID) > 0 {
		w.str("id")
		w.bin(c.ID)
	}
	w.str("method")
	w.str(c.Method)
	if len(c.Params) > 0 {
		w.str("params")
		w.bin(c.Params)
	}
	if c.Caller != "" {
		w.str("caller")
		w.str(c.Caller)
	}
	return w.finish()
}

// UnmarshalCall decodes a call envelope. Unknown keys are ignored, so later
// versions can add members; raw JSON members may come as msgpack bin or str.
// The result never aliases b.
func UnmarshalCall(b []byte) (*CallEnvelope, error) {
	var c CallEnvelope
	d := newDecoder(b)
	for n := d.mapLen(); n > 0 && d.err == nil; n-- {
		switch string(d.key()) {
		case "v":
			c.Version = d.int()
		case "id":
			c.ID = d.raw()
		case "method":
			c.Method = d.str()
		case "params":
			c.Params = d.raw()
		case "caller":
			c.Caller = d.str()
		default:
			d.skip()
		}
	}
	if err := d.finish("call"); err != nil {
		return nil, err
	}
	if c.Version != EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d", ErrEnvelopeVersion, c.Version)
	}
	return &c, nil
}

// MarshalReply encodes a reply envelope, deterministically as
// [MarshalCall] does: keys v, result, error, and in the error code,
// message, data. The version written is always [EnvelopeVersion]; r is not
// modified. It does not check that r carries exactly one of result and
// error: [UnmarshalReply] does, on the receiving side.
func MarshalReply(r *ReplyEnvelope) ([]byte, error) {
	n := 1
	size := 8 + len(r.Result) + 2*9
	if len(r.Result) > 0 {
		n++
	}
	if r.Error != nil {
		n++
		size += 32 + len(r.Error.Message) + len(r.Error.Data) + 3*9
	}
	w := newEncoder(size)
	w.mapLen(n)
	w.str("v")
	w.int(EnvelopeVersion)
	if len(r.Result) > 0 {
		w.str("result")
		w.bin(r.Result)
	}
	if e := r.Error; e != nil {
		w.str("error")
		if len(e.Data) > 0 {
			w.mapLen(3)
		} else {
			w.mapLen(2)
		}
		w.str("code")
		w.int(int64(e.Code))
		w.str("message")
		w.str(e.Message)
		if len(e.Data) > 0 {
			w.str("data")
			w.bin(e.Data)
		}
	}
	return w.finish()
}

// UnmarshalReply decodes a reply envelope and checks that it carries exactly
// one of result and error, as valid JSON: [ErrEmptyReply] when it has
// neither, [ErrInvalidReply] otherwise.
func UnmarshalReply(b []byte) (*ReplyEnvelope, error) {
	var r ReplyEnvelope
	d := newDecoder(b)
	for n := d.mapLen(); n > 0 && d.err == nil; n-- {
		switch string(d.key()) {
		case "v":
			r.Version = d.int()
		case "result":
			r.Result = d.raw()
		case "error":
			r.Error = d.envelopeError()
		default:
			d.skip()
		}
	}
	if err := d.finish("reply"); err != nil {
		return nil, err
	}
	if r.Version != EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d", ErrEnvelopeVersion, r.Version)
	}
	switch {
	case len(r.Result) == 0 && r.Error == nil:
		return nil, ErrEmptyReply
	case len(r.Result) > 0 && r.Error != nil:
		return nil, fmt.Errorf("%w: both result and error", ErrInvalidReply)
	case len(r.Result) > 0 && !json.Valid(r.Result):
		return nil, fmt.Errorf("%w: result is not valid JSON", ErrInvalidReply)
	case r.Error != nil && len(r.Error.Data) > 0 && !json.Valid(r.Error.Data):
		return nil, fmt.Errorf("%w: error data is not valid JSON", ErrInvalidReply)
	}
	return &r, nil
}

// ReplyResult returns the reply envelope of a result.
func ReplyResult(result []byte) *ReplyEnvelope {
	return &ReplyEnvelope{Version: EnvelopeVersion, Result: result}
}

// ReplyError returns the reply envelope of an error.
func ReplyError(e *Error) *ReplyEnvelope {
	if e == nil {
		// A nil error must not turn into an empty reply that looks like a
		// lost answer; say plainly what happened instead.
		e = NewError(CodeInternal, "internal error: reply with a nil error", nil)
	}
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

// ParseDeadline reads a [HeaderDeadline] value: decimal digits only, a
// positive number of nanoseconds since the Unix epoch.
func ParseDeadline(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || s[0] == '+' {
		return time.Time{}, fmt.Errorf("schema: invalid %s header %q", HeaderDeadline, s)
	}
	return time.Unix(0, n), nil
}
