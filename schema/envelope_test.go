package schema

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCallEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		env  CallEnvelope
	}{
		{name: "call", env: CallEnvelope{ID: []byte(`"101"`), Method: "demo.echo", Params: []byte(`{"a": [1, 2.50]}`), Caller: "agent-7"}},
		{name: "notification", env: CallEnvelope{Method: "notify_hello", Params: []byte(`[7]`)}},
		{name: "no params", env: CallEnvelope{ID: []byte(`1`), Method: "get_data"}},
		{name: "big id", env: CallEnvelope{ID: []byte(`12345678901234567890`), Method: "m"}},
		{name: "null id", env: CallEnvelope{ID: []byte(`null`), Method: "m"}},
		{name: "long params", env: CallEnvelope{ID: []byte(`1`), Method: strings.Repeat("m", 200), Params: []byte(`"` + strings.Repeat("x", 70000) + `"`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.env
			b, err := MarshalCall(&in)
			if err != nil {
				t.Fatalf("MarshalCall() error = %v", err)
			}
			if !reflect.DeepEqual(in, tt.env) {
				t.Errorf("MarshalCall() changed its argument to %+v", in)
			}
			got, err := UnmarshalCall(b)
			if err != nil {
				t.Fatalf("UnmarshalCall(MarshalCall()) error = %v", err)
			}
			want := tt.env
			want.Version = EnvelopeVersion
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("UnmarshalCall(MarshalCall(%+v)) = %+v, want %+v", tt.env, *got, want)
			}
			if std, _ := msgpack.Marshal(&want); !bytes.Equal(b, std) {
				t.Errorf("MarshalCall() = %x, want the msgpack encoding of the struct %x", b, std)
			}
		})
	}
}

func TestReplyEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		env  *ReplyEnvelope
	}{
		{name: "result", env: ReplyResult([]byte(`{"difference":19}`))},
		{name: "null result", env: ReplyResult([]byte(`null`))},
		{name: "error", env: ReplyError(NewError(CodeTimeout, "timed out", map[string]any{"retryable": true}))},
		{name: "tool code", env: ReplyError(NewError(2001, "insufficient funds", nil))},
		{name: "big code", env: ReplyError(NewError(math.MaxInt32+1, "x", nil))},
		{name: "small code", env: ReplyError(NewError(math.MinInt32-1, "x", nil))},
		{name: "long message", env: ReplyError(NewError(1, strings.Repeat("é", 40000), nil))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := MarshalReply(tt.env)
			if err != nil {
				t.Fatalf("MarshalReply() error = %v", err)
			}
			got, err := UnmarshalReply(b)
			if err != nil {
				t.Fatalf("UnmarshalReply(MarshalReply()) error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.env) {
				t.Errorf("UnmarshalReply(MarshalReply(%+v)) = %+v, want %+v", tt.env, got, tt.env)
			}
			if std, _ := msgpack.Marshal(tt.env); !bytes.Equal(b, std) {
				t.Errorf("MarshalReply() = %x, want the msgpack encoding of the struct %x", b, std)
			}
		})
	}
}

func TestMarshalSetsVersion(t *testing.T) {
	c := &CallEnvelope{Version: 9, Method: "m"}
	b, _ := MarshalCall(c)
	if got, err := UnmarshalCall(b); err != nil || got.Version != EnvelopeVersion {
		t.Errorf("UnmarshalCall(MarshalCall(version 9)) = %+v, %v, want version %d", got, err, EnvelopeVersion)
	}
	r := &ReplyEnvelope{Result: []byte(`1`)}
	b, _ = MarshalReply(r)
	if got, err := UnmarshalReply(b); err != nil || got.Version != EnvelopeVersion {
		t.Errorf("UnmarshalReply(MarshalReply(version 0)) = %+v, %v, want version %d", got, err, EnvelopeVersion)
	}
}

func TestReplyErr(t *testing.T) {
	e := NewError(CodeOverloaded, "overloaded", map[string]any{"retry_after_ms": 250})
	if got := ReplyError(e).Err(); !reflect.DeepEqual(got, e) {
		t.Errorf("ReplyError(%v).Err() = %+v, want %+v", e, got, e)
	}
	if got := ReplyResult([]byte(`1`)).Err(); got != nil {
		t.Errorf("ReplyResult().Err() = %v, want nil", got)
	}
	if got := ReplyError(nil).Err(); !errors.Is(got, ErrInternal) {
		t.Errorf("ReplyError(nil).Err() = %v, want %v", got, ErrInternal)
	}
}

// everyType is one msgpack value holding every type the format has, as an
// unknown member a later version might add.
var everyType = []byte{
	0xdc, 0, 21, // array16 of 21:
	0x05, 0xff, 0xc0, 0xc2, 0xc3, // fixints, nil, false, true
	0xcc, 0x01, 0xcd, 0, 1, 0xce, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1, // uints
	0xd3, 0, 0, 0, 0, 0, 0, 0, 1, // int64
	0xca, 0, 0, 0, 0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, // floats
	0xa1, 'x', 0xd9, 1, 'x', // strs
	0xc4, 1, 0, 0xc5, 0, 1, 0, // bins
	0xd4, 1, 0, 0xd8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // fixext 1 and 16
	0xc7, 1, 5, 0, // ext8
	0x81, 0xa1, 'k', 0x90, // map of an empty array
	0xdc, 0, 1, 0xde, 0, 1, 0xa0, 0xc0, // array16 holding a map16
}

// mp encodes v with the msgpack library, to build envelopes this package
// would never write.
func mp(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnmarshalCall(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    *CallEnvelope
		wantErr error // nil with want nil: any error
	}{
		{
			name: "unknown keys are ignored",
			in:   mp(t, map[string]any{"v": 1, "method": "m", "id": []byte("1"), "future": map[string]any{"x": []any{1, "y"}}}),
			want: &CallEnvelope{Version: 1, Method: "m", ID: []byte("1")},
		},
		{
			name: "str accepted where bin is written",
			in:   mp(t, map[string]any{"v": 1, "method": "m", "id": "7", "params": "[1]"}),
			want: &CallEnvelope{Version: 1, Method: "m", ID: []byte("7"), Params: []byte("[1]")},
		},
		{
			name: "version as uint64",
			in:   mp(t, map[string]any{"v": uint64(1), "method": "m"}),
			want: &CallEnvelope{Version: 1, Method: "m"},
		},
		{name: "version missing", in: mp(t, map[string]any{"method": "m"}), wantErr: ErrEnvelopeVersion},
		{name: "version 2", in: mp(t, map[string]any{"v": 2, "method": "m"}), wantErr: ErrEnvelopeVersion},
		{
			name: "unknown values of every type are skipped",
			in: append(mp(t, map[string]any{"v": 1, "method": "m"})[:0:0],
				append([]byte{0x83, 0xa1, 'v', 0x01, 0xa6, 'm', 'e', 't', 'h', 'o', 'd', 0xa1, 'm', 0xa1, 'x'}, everyType...)...),
			want: &CallEnvelope{Version: 1, Method: "m"},
		},
		{
			name: "deep nesting is skipped",
			in:   append([]byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'x'}, append(bytes.Repeat([]byte{0x91}, 100000), 0xc0)...),
			want: &CallEnvelope{Version: 1},
		},
		{name: "not a map", in: mp(t, []any{1, "m"}), wantErr: ErrMalformedEnvelope},
		{name: "empty", in: nil, wantErr: ErrMalformedEnvelope},
		{name: "truncated", in: mp(t, map[string]any{"v": 1, "method": "m"})[:5], wantErr: ErrMalformedEnvelope},
		{name: "trailing bytes", in: append(mp(t, map[string]any{"v": 1, "method": "m"}), 0xc0), wantErr: ErrMalformedEnvelope},
		{name: "method not a string", in: mp(t, map[string]any{"v": 1, "method": 5}), wantErr: ErrMalformedEnvelope},
		{name: "version a float", in: mp(t, map[string]any{"v": 1.0, "method": "m"}), wantErr: ErrMalformedEnvelope},
		{name: "version overflows", in: []byte{0x81, 0xa1, 'v', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, wantErr: ErrMalformedEnvelope},
		{name: "key not a string", in: []byte{0x81, 0x01, 0x01}, wantErr: ErrMalformedEnvelope},
		{name: "length past the end", in: []byte{0x82, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0xc6, 0xf0, 0x30, 0x9a, 0x5e}, wantErr: ErrMalformedEnvelope},
		{name: "huge unknown array", in: []byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff}, wantErr: ErrMalformedEnvelope},
		{name: "huge map", in: []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01}, wantErr: ErrMalformedEnvelope},
		{name: "never-used code", in: []byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'x', 0xc1}, wantErr: ErrMalformedEnvelope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := UnmarshalCall(tt.in)
			if tt.want != nil {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Errorf("UnmarshalCall(%x) = %+v, %v, want %+v", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("UnmarshalCall(%x) = %+v, %v, want error %v", tt.in, got, err, tt.wantErr)
			}
		})
	}
}

// TestUnmarshalHostileLengths checks that a small message claiming a huge
// length, wherever the length sits, is refused without allocating anything
// near that size.
func TestUnmarshalHostileLengths(t *testing.T) {
	head := []byte{0x82, 0xa1, 'v', 0x01}
	tests := []struct {
		name string
		in   []byte
	}{
		{name: "bin32 id", in: append(head, 0xa2, 'i', 'd', 0xc6, 0xff, 0xff, 0xff, 0xf0, '1')},
		{name: "str32 method", in: append(head, 0xa6, 'm', 'e', 't', 'h', 'o', 'd', 0xdb, 0x7f, 0xff, 0xff, 0xff, 'm')},
		{name: "str32 key", in: append(head, 0xdb, 0x10, 0, 0, 0, 'k')},
		{name: "unknown bin32", in: append(head, 0xa1, 'x', 0xc6, 0x10, 0, 0, 0, 0)},
		{name: "unknown ext32", in: append(head, 0xa1, 'x', 0xc9, 0x10, 0, 0, 0, 1, 0)},
		{name: "bin32 in an unknown array", in: append(head, 0xa1, 'x', 0x92, 0x01, 0xc6, 0x10, 0, 0, 0, 0)},
		{name: "str32 in an unknown map", in: append(head, 0xa1, 'x', 0x81, 0xa1, 'k', 0xdb, 0x10, 0, 0, 0, 0)},
		{name: "array32 in an unknown array", in: append(head, 0xa1, 'x', 0x91, 0xdd, 0x10, 0, 0, 0, 0)},
		{name: "map32 in an unknown map", in: append(head, 0xa1, 'x', 0x81, 0xa0, 0xdf, 0x10, 0, 0, 0, 0)},
		{name: "map32 error", in: append(head, 0xa5, 'e', 'r', 'r', 'o', 'r', 0xdf, 0x10, 0, 0, 0, 0)},
		{name: "bin32 error data", in: append(head, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81, 0xa4, 'd', 'a', 't', 'a', 0xc6, 0x10, 0, 0, 0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const runs = 100
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range runs {
				if _, err := UnmarshalCall(tt.in); !errors.Is(err, ErrMalformedEnvelope) {
					t.Fatalf("UnmarshalCall(%x) error = %v, want %v", tt.in, err, ErrMalformedEnvelope)
				}
				if _, err := UnmarshalReply(tt.in); !errors.Is(err, ErrMalformedEnvelope) {
					t.Fatalf("UnmarshalReply(%x) error = %v, want %v", tt.in, err, ErrMalformedEnvelope)
				}
			}
			runtime.ReadMemStats(&after)
			// A decode that sized a buffer by the claimed length would
			// allocate megabytes; a few kilobytes leave room for the error
			// values and whatever else the runtime allocates meanwhile.
			if got := (after.TotalAlloc - before.TotalAlloc) / (2 * runs); got > 4096 {
				t.Errorf("decoding %x allocated %d bytes per message, want at most 4096", tt.in, got)
			}
		})
	}
}

func TestUnmarshalReply(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    *ReplyEnvelope
		wantErr error
	}{
		{
			name: "unknown keys are ignored",
			in:   mp(t, map[string]any{"v": 1, "result": []byte("true"), "worker": "w-1"}),
			want: &ReplyEnvelope{Version: 1, Result: []byte("true")},
		},
		{
			name: "nil error is no error",
			in:   mp(t, map[string]any{"v": 1, "result": []byte("1"), "error": nil}),
			want: &ReplyEnvelope{Version: 1, Result: []byte("1")},
		},
		{name: "empty reply", in: mp(t, map[string]any{"v": 1}), wantErr: ErrEmptyReply},
		{name: "empty result", in: mp(t, map[string]any{"v": 1, "result": []byte{}}), wantErr: ErrEmptyReply},
		{name: "nil result", in: mp(t, map[string]any{"v": 1, "result": nil}), wantErr: ErrEmptyReply},
		{name: "version missing", in: mp(t, map[string]any{"result": []byte("1")}), wantErr: ErrEnvelopeVersion},
		{name: "version 0", in: mp(t, map[string]any{"v": 0, "result": []byte("1")}), wantErr: ErrEnvelopeVersion},
		{
			name:    "both result and error",
			in:      mp(t, map[string]any{"v": 1, "result": []byte("1"), "error": map[string]any{"code": 1, "message": "x"}}),
			wantErr: ErrInvalidReply,
		},
		{name: "result not JSON", in: mp(t, map[string]any{"v": 1, "result": []byte("{oops")}), wantErr: ErrInvalidReply},
		{
			name:    "error data not JSON",
			in:      mp(t, map[string]any{"v": 1, "error": map[string]any{"code": 1, "message": "x", "data": []byte("<html>")}}),
			wantErr: ErrInvalidReply,
		},
		{
			name: "unknown error keys are ignored",
			in:   mp(t, map[string]any{"v": 1, "error": map[string]any{"code": -32003, "message": "unavailable", "stack": []string{"x"}}}),
			want: &ReplyEnvelope{Version: 1, Error: &EnvelopeError{Code: -32003, Message: "unavailable"}},
		},
		{name: "empty bytes", in: nil, wantErr: ErrMalformedEnvelope},
		{name: "error not a map", in: mp(t, map[string]any{"v": 1, "error": "boom"}), wantErr: ErrMalformedEnvelope},
		{name: "code not an integer", in: mp(t, map[string]any{"v": 1, "error": map[string]any{"code": 1.5, "message": "x"}}), wantErr: ErrMalformedEnvelope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := UnmarshalReply(tt.in)
			if tt.want != nil {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Errorf("UnmarshalReply(%x) = %+v, %v, want %+v", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil || got != nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("UnmarshalReply(%x) = %+v, %v, want error %v", tt.in, got, err, tt.wantErr)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := FormatDeadline(at)
	if s != "1767323045000000006" {
		t.Errorf("FormatDeadline(%v) = %q, want %q", at, s, "1767323045000000006")
	}
	got, err := ParseDeadline(s)
	if err != nil || !got.Equal(at) {
		t.Errorf("ParseDeadline(%q) = %v, %v, want %v", s, got, err, at)
	}
}

func TestParseDeadlineErrors(t *testing.T) {
	for _, s := range []string{"", "abc", "0", "-1", "1.5", "1e9", " 1", "1 ", "99999999999999999999", "0x10", "1767323045s", "+1767323045000000006", "１"} {
		t.Run(s, func(t *testing.T) {
			if got, err := ParseDeadline(s); err == nil || !got.IsZero() {
				t.Errorf("ParseDeadline(%q) = %v, %v, want an error", s, got, err)
			}
		})
	}
}
