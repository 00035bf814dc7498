package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

// parseSeeds are bodies every parser fuzz run starts from, next to the
// corpus in testdata/fuzz/FuzzParse.
var parseSeeds = []string{
	`{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}`,
	`{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}`,
	`{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}`,
	`{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`,
	`{"jsonrpc": "2.0", "method": 1, "params": "bar"}`,
	`[]`,
	`[1]`,
	`[1,2,3]`,
	`[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"foo":"boo"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]`,
	`{"jsonrpc":"2.0","method":"m","id":12345678901234567890}`,
	`{"jsonrpc":"2.0","method":"m","id":1.5e3}`,
	`{"jsonrpc":"2.0","method":"m","id":null}`,
	`{"jsonrpc":"2.0","method":"a\u002eb","\u0069d":"x\"y","ID":2}`,
	`[[[[{"jsonrpc":"2.0","method":"m"}]]]]`,
	"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":[-0.5e+3,0,1E2,true,false,null,\"\\u00e9\\n\xc3\xa9\"],\"id\":-1}",
	"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":[\"\xed\xa0\x80\"],\"id\":1}",
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1,{"a":`,
}

// referenceVerdict checks scanJSON's verdict on b with the checks it
// replaces, run one after another: encoding/json's validator, the depth
// count and the UTF-8 check. A body that is not JSON and nests too deeply
// may be judged either way, by which problem comes first.
func referenceVerdict(t *testing.T, b []byte, max int) {
	t.Helper()
	got, elems := scanJSON(b, max, nil)
	tooDeep := max > 0 && depth(b, max) > max
	var ok bool
	switch {
	case !json.Valid(b):
		ok = got == scanSyntax || got == scanTooDeep && tooDeep
	case tooDeep:
		ok = got == scanTooDeep
	case !utf8.Valid(b):
		ok = got == scanUTF8
	default:
		ok = got == scanOK
	}
	if !ok {
		t.Fatalf("scanJSON(%q, %d) = %d; json.Valid %v, utf8.Valid %v, too deep %v",
			b, max, got, json.Valid(b), utf8.Valid(b), tooDeep)
	}
	if validJSON(b) != json.Valid(b) {
		t.Fatalf("validJSON(%q) = %v, want %v (json.Valid's)", b, validJSON(b), json.Valid(b))
	}
	if got == scanOK || got == scanUTF8 {
		var array []json.RawMessage
		if json.Unmarshal(b, &array) != nil {
			array = nil
		}
		if elems != len(array) {
			t.Fatalf("scanJSON(%q, %d) counted %d elements, want %d", b, max, elems, len(array))
		}
	}
}

// referenceItem decodes one element the plain way, through a map, as a
// cross-check of parseItem's scanner.
func referenceItem(raw []byte) (id json.RawMessage, method string, params json.RawMessage, code int) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, "", nil, CodeInvalidRequest
	}
	if v, ok := members["id"]; ok {
		if !bytes.ContainsAny(v[:1], `"n-0123456789`) {
			return nil, "", nil, CodeInvalidRequest
		}
		id = v
	}
	if string(members["jsonrpc"]) != `"2.0"` {
		return id, "", nil, CodeInvalidRequest
	}
	m, ok := members["method"]
	if !ok || m[0] != '"' || json.Unmarshal(m, &method) != nil {
		return id, "", nil, CodeInvalidRequest
	}
	if p, ok := members["params"]; ok {
		if p[0] != '{' && p[0] != '[' {
			return id, method, nil, CodeInvalidRequest
		}
		params = p
	}
	return id, method, params, 0
}

func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := Limits{MaxBatchItems: 50, MaxDepth: 32}
		referenceVerdict(t, body, lim.MaxDepth)
		referenceVerdict(t, body, 0)
		items, batch, perr := Parse(body, lim)
		// The body as a whole is judged as it would be by the depth
		// check, then encoding/json, then the UTF-8 check.
		wantCode := 0
		switch {
		case depth(body, lim.MaxDepth) > lim.MaxDepth:
			wantCode = CodeLimitExceeded
		case !json.Valid(body) || !utf8.Valid(body):
			wantCode = CodeParseError
		}
		switch {
		case wantCode != 0 && (perr == nil || perr.Code != wantCode):
			t.Fatalf("Parse(%q) error = %v, want code %d", body, perr, wantCode)
		case wantCode == 0 && perr != nil && (perr.Code == CodeParseError || bytes.Contains(perr.Data, []byte(`"max_depth"`))):
			t.Fatalf("Parse(%q) error = %v %s, want none for the body as a whole", body, perr, perr.Data)
		}
		if perr != nil {
			if items != nil {
				t.Fatalf("Parse(%q) = items and error %v", body, perr)
			}
			if !json.Valid(body) && perr.Code != CodeParseError && perr.Code != CodeLimitExceeded {
				t.Fatalf("Parse(%q) error = %v, want a parse error for invalid JSON", body, perr)
			}
			return
		}
		if len(items) == 0 || !json.Valid(body) {
			t.Fatalf("Parse(%q) = %d items, no error", body, len(items))
		}
		var raws []json.RawMessage
		if batch {
			if err := json.Unmarshal(body, &raws); err != nil || len(raws) != len(items) {
				t.Fatalf("Parse(%q) = %d items, want %d", body, len(items), len(raws))
			}
		} else {
			raws = []json.RawMessage{bytes.TrimSpace(body)}
		}
		var rs []Response
		for i, it := range items {
			id, method, params, code := referenceItem(raws[i])
			gotCode := 0
			if it.Err != nil {
				gotCode = it.Err.Code
			}
			if gotCode != code || !bytes.Equal(it.Request.ID, id) || (code == 0 && (it.Request.Method != method || !bytes.Equal(it.Request.Params, params))) {
				t.Fatalf("Parse(%q) item %d = %q %q %q %d, want %q %q %q %d", body, i,
					it.Request.ID, it.Request.Method, it.Request.Params, gotCode, id, method, params, code)
			}
			if it.Request.ID != nil && !bytes.Contains(body, it.Request.ID) {
				t.Fatalf("Parse(%q) item %d id %q is not the client's bytes", body, i, it.Request.ID)
			}
			r := Response{ID: it.Request.ID, Result: it.Request.Params, Error: it.Err}
			rs = append(rs, r)
			b, err := r.MarshalJSON()
			if err != nil || !json.Valid(b) {
				t.Fatalf("MarshalJSON(%+v) = %q, %v, want valid JSON", r, b, err)
			}
			var back Response
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("UnmarshalJSON(%q): %v", b, err)
			}
			wantID := it.Request.ID
			if wantID == nil {
				wantID = json.RawMessage("null")
			}
			if !bytes.Equal(back.ID, wantID) {
				t.Fatalf("id %q marshalled as %q, read back as %q", it.Request.ID, b, back.ID)
			}
			if (back.Error == nil) != (it.Err == nil) || (it.Err != nil && !errors.Is(back.Error, it.Err)) {
				t.Fatalf("response %q read back with error %v, want %v", b, back.Error, it.Err)
			}
		}
		b, err := AppendBatch(nil, rs)
		if err != nil || !json.Valid(b) {
			t.Fatalf("AppendBatch() = %q, %v, want valid JSON", b, err)
		}
	})
}

func FuzzEnvelope(f *testing.F) {
	f.Add([]byte(`"101"`), "demo.echo", []byte(`{"a":1}`), "agent-7", []byte(`{"a":1}`), int64(0), "", []byte(nil))
	f.Add([]byte(nil), "notify_hello", []byte(`[7]`), "", []byte(`null`), int64(CodeTimeout), "timed out", []byte(`{"retryable":true}`))
	f.Add([]byte(`12345678901234567890`), "m", []byte(nil), "", []byte(nil), int64(2001), "insufficient funds", []byte(nil))
	f.Add([]byte{0x83, 0xa1, 'v', 0x01}, "", []byte{0xc4, 0xff}, "é", []byte(`{oops`), int64(-1<<40), "", []byte(`<`))
	// Envelopes as the bytes to decode: unknown members of every type, a
	// length past the end inside an unknown member, a result, an error.
	f.Add(append([]byte{0x83, 0xa1, 'v', 0x01, 0xa6, 'm', 'e', 't', 'h', 'o', 'd', 0xa1, 'm', 0xa1, 'x'}, everyType...),
		"m",
		[]byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'x', 0x91, 0xc6, 0x10, 0, 0, 0, 0},
		"",
		[]byte{0x82, 0xa1, 'v', 0x01, 0xa6, 'r', 'e', 's', 'u', 'l', 't', 0xa1, '1'},
		int64(1<<40),
		"x",
		[]byte{0x82, 0xa1, 'v', 0x01, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x82, 0xa4, 'c', 'o', 'd', 'e', 0xd0, 0x80, 0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e', 0xc0})
	f.Fuzz(func(t *testing.T, id []byte, method string, params []byte, caller string, result []byte, code int64, message string, data []byte) {
		// Encode then decode is the identity for a call.
		call := CallEnvelope{ID: nonEmpty(id), Method: method, Params: nonEmpty(params), Caller: caller}
		b, err := MarshalCall(&call)
		if err != nil {
			t.Fatalf("MarshalCall(%+v) error = %v", call, err)
		}
		got, err := UnmarshalCall(b)
		call.Version = EnvelopeVersion
		if err != nil || !reflect.DeepEqual(*got, call) {
			t.Fatalf("UnmarshalCall(MarshalCall(%+v)) = %+v, %v", call, got, err)
		}

		// A result reply comes back as it went, or is refused for what it is.
		rb, err := MarshalReply(ReplyResult(result))
		if err != nil {
			t.Fatalf("MarshalReply() error = %v", err)
		}
		r, err := UnmarshalReply(rb)
		switch {
		case len(result) == 0:
			if !errors.Is(err, ErrEmptyReply) {
				t.Fatalf("UnmarshalReply(empty result) error = %v, want %v", err, ErrEmptyReply)
			}
		case !json.Valid(result):
			if !errors.Is(err, ErrInvalidReply) {
				t.Fatalf("UnmarshalReply(result %q) error = %v, want %v", result, err, ErrInvalidReply)
			}
		case err != nil || !bytes.Equal(r.Result, result) || r.Error != nil:
			t.Fatalf("UnmarshalReply(MarshalReply(result %q)) = %+v, %v", result, r, err)
		}

		// So does an error reply.
		e := &Error{Code: int(code), Message: message, Data: nonEmpty(data)}
		eb, err := MarshalReply(ReplyError(e))
		if err != nil {
			t.Fatalf("MarshalReply() error = %v", err)
		}
		r, err = UnmarshalReply(eb)
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			if !errors.Is(err, ErrInvalidReply) {
				t.Fatalf("UnmarshalReply(data %q) error = %v, want %v", e.Data, err, ErrInvalidReply)
			}
		} else if err != nil || !reflect.DeepEqual(r.Err(), e) || r.Result != nil {
			t.Fatalf("UnmarshalReply(MarshalReply(%+v)) = %+v, %v", e, r, err)
		}

		// Any bytes at all: decoding returns, and what decodes re-encodes to
		// something that decodes the same.
		for _, raw := range [][]byte{id, params, result, data} {
			if c, err := UnmarshalCall(raw); err == nil {
				b, _ := MarshalCall(c)
				if c2, err := UnmarshalCall(b); err != nil || !reflect.DeepEqual(c, c2) {
					t.Fatalf("UnmarshalCall(%x) = %+v, re-encoded to %+v, %v", raw, c, c2, err)
				}
			}
			if r, err := UnmarshalReply(raw); err == nil {
				b, _ := MarshalReply(r)
				if r2, err := UnmarshalReply(b); err != nil || !reflect.DeepEqual(r, r2) {
					t.Fatalf("UnmarshalReply(%x) = %+v, re-encoded to %+v, %v", raw, r, r2, err)
				}
			}
		}
	})
}

func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
