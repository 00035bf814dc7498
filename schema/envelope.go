package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
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
// neither, [ErrInvalidReply] otherwise. This is the check of a worker's
// answer (PROTOCOL.md, rule 1) that the aggregator makes: its verdict on
// the JSON is [encoding/json.Valid]'s, reached in one pass of the scanner
// that [Parse] uses.
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
	case len(r.Result) > 0 && !validJSON(r.Result):
		return nil, fmt.Errorf("%w: result is not valid JSON", ErrInvalidReply)
	case r.Error != nil && len(r.Error.Data) > 0 && !validJSON(r.Error.Data):
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

// The envelope codec drives the msgpack library's streaming encoder and
// decoder member by member: no reflection, and the library picks the
// shortest form of every length and integer, which is what PROTOCOL.md
// promises. Encoders and decoders are pooled, as the library pools its own,
// so that a message costs only the allocations its result needs.

// envelopeEncoder writes one envelope. The first error is kept in err and
// every later write is skipped.
type envelopeEncoder struct {
	enc *msgpack.Encoder
	buf bytes.Buffer
	err error
}

var encoders = sync.Pool{New: func() any { return &envelopeEncoder{enc: msgpack.NewEncoder(nil)} }}

// newEncoder returns a pooled encoder writing into a buffer of capacity
// size; [envelopeEncoder.finish] returns it to the pool.
func newEncoder(size int) *envelopeEncoder {
	w := encoders.Get().(*envelopeEncoder)
	w.buf.Grow(size)
	w.enc.Reset(&w.buf)
	return w
}

func (w *envelopeEncoder) mapLen(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

func (w *envelopeEncoder) str(s string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(s)
	}
}

func (w *envelopeEncoder) int(n int64) {
	if w.err == nil {
		w.err = w.enc.EncodeInt(n)
	}
}

// bin writes raw JSON as msgpack bin; p is never nil, since an absent
// member is left out rather than written as nil.
func (w *envelopeEncoder) bin(p []byte) {
	if w.err == nil {
		w.err = w.enc.EncodeBytes(p)
	}
}

// finish returns the encoded bytes, which now belong to the caller, and
// puts w back in the pool.
func (w *envelopeEncoder) finish() ([]byte, error) {
	b, err := w.buf.Bytes(), w.err
	w.buf = bytes.Buffer{}
	w.err = nil
	w.enc.Reset(nil)
	encoders.Put(w)
	if err != nil {
		return nil, fmt.Errorf("schema: encoding envelope: %w", err)
	}
	return b, nil
}

// envelopeDecoder reads one envelope with the library's decoder over data,
// a private copy of the message. The decoder reads straight from r, a
// [bytes.Reader] (an [io.ByteScanner], which the library does not buffer),
// so r always knows how many bytes remain. Every length the message claims
// is checked against them before anything is sized or skipped by it: a
// small hostile message never makes it allocate much or loop long. Strings
// and raw members are read by their length and then sliced out of data, so
// the library never sizes a buffer by a claimed length. The first problem
// is kept in err; every later read returns a zero value.
type envelopeDecoder struct {
	dec  *msgpack.Decoder
	r    bytes.Reader
	data []byte
	err  error
}

var decoders = sync.Pool{New: func() any { return &envelopeDecoder{dec: msgpack.NewDecoder(nil)} }}

// newDecoder returns a pooled decoder reading a copy of b;
// [envelopeDecoder.finish] returns it to the pool.
func newDecoder(b []byte) *envelopeDecoder {
	d := decoders.Get().(*envelopeDecoder)
	d.data = bytes.Clone(b)
	d.r.Reset(d.data)
	d.dec.Reset(&d.r)
	return d
}

var errTruncated = errors.New("truncated")

// fail records err, the first problem, with the offset where it was found.
func (d *envelopeDecoder) fail(err error) {
	if d.err != nil {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errTruncated
	}
	d.err = fmt.Errorf("%w at byte %d", err, len(d.data)-d.r.Len())
}

// finish reports the first problem of the decoding of what, or trailing
// bytes, and puts d back in the pool.
func (d *envelopeDecoder) finish(what string) error {
	if d.err == nil && d.r.Len() != 0 {
		d.fail(errors.New("trailing bytes"))
	}
	err := d.err
	d.data, d.err = nil, nil
	d.r.Reset(nil)
	d.dec.Reset(nil)
	decoders.Put(d)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformedEnvelope, what, err)
	}
	return nil
}

// peek returns the code of the next value without consuming it.
func (d *envelopeDecoder) peek() byte {
	if d.err != nil {
		return 0
	}
	c, err := d.dec.PeekCode()
	if err != nil {
		d.fail(err)
		return 0
	}
	return c
}

// fits reports whether n values of at least size bytes each, plus pending
// values of at least a byte, can still follow, and records a problem if
// not. A negative n is a length that overflowed int.
func (d *envelopeDecoder) fits(n, size int, pending uint64) bool {
	if n < 0 || uint64(n)*uint64(size)+pending > uint64(d.r.Len()) {
		d.fail(fmt.Errorf("length %d past the end", n))
		return false
	}
	return true
}

// take returns the next n bytes, a slice of data capped so that appending
// to it can never write into the next member.
func (d *envelopeDecoder) take(n int) []byte {
	if d.err != nil || !d.fits(n, 1, 0) {
		return nil
	}
	off := len(d.data) - d.r.Len()
	if _, err := d.r.Seek(int64(n), io.SeekCurrent); err != nil {
		d.fail(err)
		return nil
	}
	return d.data[off : off+n : off+n]
}

// mapLen reads the header of a map (nil is not a map) and returns the
// number of its pairs.
func (d *envelopeDecoder) mapLen() int {
	c := d.peek()
	if d.err != nil {
		return 0
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		d.fail(fmt.Errorf("want a map, got 0x%02x", c))
		return 0
	}
	n, err := d.dec.DecodeMapLen()
	if err != nil {
		d.fail(err)
		return 0
	}
	if !d.fits(n, 2, 0) {
		return 0
	}
	return n
}

// bytes reads a str, a bin or nil (reported as nil, true).
func (d *envelopeDecoder) bytes() ([]byte, bool) {
	c := d.peek()
	if d.err != nil {
		return nil, false
	}
	if c == msgpcode.Nil {
		if err := d.dec.DecodeNil(); err != nil {
			d.fail(err)
			return nil, false
		}
		return nil, true
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return nil, false
	}
	n, err := d.dec.DecodeBytesLen()
	if err != nil {
		d.fail(err)
		return nil, false
	}
	p := d.take(n)
	return p, d.err == nil
}

// key reads a map key, which must be a string.
func (d *envelopeDecoder) key() []byte {
	p, ok := d.bytes()
	if !ok {
		d.fail(errors.New("map key is not a string"))
	}
	return p
}

// raw reads a raw JSON member: bin, str or nil. An empty value is nil, as
// if the key were absent.
func (d *envelopeDecoder) raw() []byte {
	p, ok := d.bytes()
	if !ok {
		d.fail(errors.New("want bin or str"))
		return nil
	}
	if len(p) == 0 {
		return nil
	}
	return p
}

// str reads a text member: str, bin or nil (the empty string).
func (d *envelopeDecoder) str() string {
	p, ok := d.bytes()
	if !ok {
		d.fail(errors.New("want str"))
	}
	return string(p)
}

// int reads an integer of any msgpack width that fits an int. The library
// would read nil as 0 and a uint64 past MaxInt64 as a negative number;
// both are refused here.
func (d *envelopeDecoder) int() int {
	c := d.peek()
	if d.err != nil {
		return 0
	}
	var n int64
	switch c {
	case msgpcode.Nil:
		d.fail(errors.New("want an integer, got nil"))
		return 0
	case msgpcode.Uint64:
		u, err := d.dec.DecodeUint64()
		if err != nil {
			d.fail(err)
			return 0
		}
		if u > math.MaxInt64 {
			d.fail(errors.New("integer overflows"))
			return 0
		}
		n = int64(u)
	default:
		var err error
		if n, err = d.dec.DecodeInt64(); err != nil {
			d.fail(err)
			return 0
		}
	}
	if int64(int(n)) != n {
		d.fail(errors.New("integer overflows"))
		return 0
	}
	return int(n)
}

// envelopeError reads the error member of a reply: a map or nil.
func (d *envelopeDecoder) envelopeError() *EnvelopeError {
	if d.peek() == msgpcode.Nil {
		if err := d.dec.DecodeNil(); err != nil {
			d.fail(err)
		}
		return nil
	}
	var e EnvelopeError
	for n := d.mapLen(); n > 0 && d.err == nil; n-- {
		switch string(d.key()) {
		case "code":
			e.Code = d.int()
		case "message":
			e.Message = d.str()
		case "data":
			e.Data = d.raw()
		default:
			d.skip()
		}
	}
	return &e
}

// skip passes over one value of any type. It counts the values still to
// skip instead of recursing, so deep nesting costs no stack, and checks
// every length against the bytes that remain before it skips by it. The
// library's Skip passes over the values that hold no length, all of a
// fixed size of at most nine bytes, and refuses the never-used code.
func (d *envelopeDecoder) skip() {
	for pending := uint64(1); pending > 0 && d.err == nil; pending-- {
		c := d.peek()
		if d.err != nil {
			return
		}
		var err error
		switch {
		case msgpcode.IsFixedMap(c), c == msgpcode.Map16, c == msgpcode.Map32:
			var n int
			if n, err = d.dec.DecodeMapLen(); err == nil && d.fits(n, 2, pending-1) {
				pending += 2 * uint64(n)
			}
		case msgpcode.IsFixedArray(c), c == msgpcode.Array16, c == msgpcode.Array32:
			var n int
			if n, err = d.dec.DecodeArrayLen(); err == nil && d.fits(n, 1, pending-1) {
				pending += uint64(n)
			}
		case msgpcode.IsString(c), msgpcode.IsBin(c):
			var n int
			if n, err = d.dec.DecodeBytesLen(); err == nil {
				d.take(n)
			}
		case msgpcode.IsExt(c):
			var n int
			if _, n, err = d.dec.DecodeExtHeader(); err == nil {
				d.take(n)
			}
		default:
			err = d.dec.Skip()
		}
		if err != nil {
			d.fail(err)
		}
	}
}
