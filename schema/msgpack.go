package schema

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The append functions write the msgpack forms the envelope uses, each in
// its shortest encoding.

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func appendKeyInt(b []byte, key string, n int64) []byte {
	return appendInt(appendStr(b, key), n)
}

func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0 && n <= 0x7f, n < 0 && n >= -32:
		return append(b, byte(n))
	case n > 0 && n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n > 0 && n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n > 0 && n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	case n > 0:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

// decoder reads the few msgpack forms an envelope holds, straight from a
// byte slice. Every length is checked against the bytes that remain, so a
// length claimed by hostile input never makes it allocate or loop; the
// first problem is kept in err and every later read returns a zero value.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format+" at byte %d", append(args, d.off)...)
	}
}

// next returns the next n bytes.
func (d *decoder) next(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated")
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

func (d *decoder) code() byte {
	if p := d.next(1); p != nil {
		return p[0]
	}
	return 0
}

// uint reads a big-endian unsigned integer of size bytes.
func (d *decoder) uint(size int) uint64 {
	p := d.next(uint64(size))
	switch {
	case p == nil:
		return 0
	case size == 1:
		return uint64(p[0])
	case size == 2:
		return uint64(binary.BigEndian.Uint16(p))
	case size == 4:
		return uint64(binary.BigEndian.Uint32(p))
	}
	return binary.BigEndian.Uint64(p)
}

// finish reports the first problem of the decoding of what, or trailing
// bytes.
func (d *decoder) finish(what string) error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformedEnvelope, what, d.err)
	}
	return nil
}

// mapOf reads a map whose keys are strings and calls member for each key;
// member must consume the value.
func (d *decoder) mapOf(member func(key []byte)) {
	var n uint64
	switch c := d.code(); {
	case d.err != nil:
		return
	case c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n = d.uint(2)
	case c == 0xdf:
		n = d.uint(4)
	default:
		d.fail("want a map, got 0x%02x", c)
		return
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		key, ok := d.bytes()
		if !ok {
			d.fail("map key is not a string")
			return
		}
		member(key)
	}
}

// bytes reads a str, a bin or nil (reported as nil, true).
func (d *decoder) bytes() ([]byte, bool) {
	var n uint64
	switch c := d.code(); {
	case d.err != nil:
		return nil, false
	case c == 0xc0:
		return nil, true
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xc4:
		n = d.uint(1)
	case c == 0xda, c == 0xc5:
		n = d.uint(2)
	case c == 0xdb, c == 0xc6:
		n = d.uint(4)
	default:
		d.off--
		return nil, false
	}
	p := d.next(n)
	return p, d.err == nil
}

// raw reads a raw JSON member: bin, str or nil. An empty value is nil, as
// if the key were absent.
func (d *decoder) raw() []byte {
	p, ok := d.bytes()
	if !ok {
		d.fail("want bin or str")
		return nil
	}
	if len(p) == 0 {
		return nil
	}
	// Cap the slice so that appending to it can never write into the next
	// member.
	return p[:len(p):len(p)]
}

// str reads a text member: str, bin or nil (the empty string).
func (d *decoder) str() string {
	p, ok := d.bytes()
	if !ok {
		d.fail("want str")
	}
	return string(p)
}

// int reads an integer of any msgpack width that fits an int.
func (d *decoder) int() int {
	var n int64
	switch c := d.code(); {
	case d.err != nil:
		return 0
	case c <= 0x7f:
		n = int64(c)
	case c >= 0xe0:
		n = int64(int8(c))
	case c == 0xcc:
		n = int64(d.uint(1))
	case c == 0xcd:
		n = int64(d.uint(2))
	case c == 0xce:
		n = int64(d.uint(4))
	case c == 0xcf:
		u := d.uint(8)
		if u > math.MaxInt64 {
			d.fail("integer overflows")
		}
		n = int64(u)
	case c == 0xd0:
		n = int64(int8(d.uint(1)))
	case c == 0xd1:
		n = int64(int16(d.uint(2)))
	case c == 0xd2:
		n = int64(int32(d.uint(4)))
	case c == 0xd3:
		n = int64(d.uint(8))
	default:
		d.fail("want an integer, got 0x%02x", c)
		return 0
	}
	if int64(int(n)) != n {
		d.fail("integer overflows")
		return 0
	}
	return int(n)
}

// envelopeError reads the error member of a reply: a map or nil.
func (d *decoder) envelopeError() *EnvelopeError {
	if d.err == nil && d.off < len(d.b) && d.b[d.off] == 0xc0 {
		d.off++
		return nil
	}
	var e EnvelopeError
	d.mapOf(func(key []byte) {
		switch string(key) {
		case "code":
			e.Code = d.int()
		case "message":
			e.Message = d.str()
		case "data":
			e.Data = d.raw()
		default:
			d.skip()
		}
	})
	return &e
}

// skip passes over one value of any type. It counts the values still to
// skip instead of recursing, so deep nesting costs no stack.
func (d *decoder) skip() {
	for pending := uint64(1); pending > 0 && d.err == nil; pending-- {
		if pending > uint64(len(d.b)-d.off) {
			d.fail("truncated")
			return
		}
		c := d.code()
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c&0xf0 == 0x80:
			pending += 2 * uint64(c&0x0f)
		case c&0xf0 == 0x90:
			pending += uint64(c & 0x0f)
		case c&0xe0 == 0xa0:
			d.next(uint64(c & 0x1f))
		case c == 0xc4, c == 0xd9:
			d.next(d.uint(1))
		case c == 0xc5, c == 0xda:
			d.next(d.uint(2))
		case c == 0xc6, c == 0xdb:
			d.next(d.uint(4))
		case c == 0xc7:
			d.next(d.uint(1) + 1)
		case c == 0xc8:
			d.next(d.uint(2) + 1)
		case c == 0xc9:
			d.next(d.uint(4) + 1)
		case c == 0xca:
			d.next(4)
		case c == 0xcb:
			d.next(8)
		case c == 0xcc, c == 0xd0:
			d.next(1)
		case c == 0xcd, c == 0xd1:
			d.next(2)
		case c == 0xce, c == 0xd2:
			d.next(4)
		case c == 0xcf, c == 0xd3:
			d.next(8)
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16 and a type byte
			d.next(1 + 1<<(c-0xd4))
		case c == 0xdc:
			pending += d.uint(2)
		case c == 0xdd:
			pending += d.uint(4)
		case c == 0xde:
			pending += 2 * d.uint(2)
		case c == 0xdf:
			pending += 2 * d.uint(4)
		default: // 0xc1 is never used
			d.fail("invalid code 0x%02x", c)
		}
	}
}
