package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// wantItem is what one parsed element must be. An empty id means the member
// was absent (a notification); a zero code means the element is valid.
type wantItem struct {
	id     string
	method string
	params string
	code   int
}

func (w wantItem) String() string {
	return fmt.Sprintf("{id:%s method:%q params:%s code:%d}", w.id, w.method, w.params, w.code)
}

func gotItems(items []Item) []wantItem {
	got := make([]wantItem, len(items))
	for i, it := range items {
		got[i] = wantItem{id: string(it.Request.ID), method: it.Request.Method, params: string(it.Request.Params)}
		if it.Err != nil {
			got[i].code = it.Err.Code
		}
	}
	return got
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		lim   Limits
		want  []wantItem
		batch bool
		code  int // the code of the whole-body error, zero for none
	}{
		// The examples of section 7 of the JSON-RPC 2.0 specification.
		{
			name: "positional params",
			body: `{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}`,
			want: []wantItem{{id: "1", method: "subtract", params: "[42, 23]"}},
		},
		{
			name: "positional params reversed",
			body: `{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}`,
			want: []wantItem{{id: "2", method: "subtract", params: "[23, 42]"}},
		},
		{
			name: "named params",
			body: `{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}`,
			want: []wantItem{{id: "3", method: "subtract", params: `{"subtrahend": 23, "minuend": 42}`}},
		},
		{
			name: "named params in another order",
			body: `{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}`,
			want: []wantItem{{id: "4", method: "subtract", params: `{"minuend": 42, "subtrahend": 23}`}},
		},
		{
			name: "notification",
			body: `{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}`,
			want: []wantItem{{method: "update", params: "[1,2,3,4,5]"}},
		},
		{
			name: "notification without params",
			body: `{"jsonrpc": "2.0", "method": "foobar"}`,
			want: []wantItem{{method: "foobar"}},
		},
		{
			name: "non-existent method parses",
			body: `{"jsonrpc": "2.0", "method": "foobar", "id": "1"}`,
			want: []wantItem{{id: `"1"`, method: "foobar"}},
		},
		{
			name: "invalid JSON",
			body: `{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`,
			code: CodeParseError,
		},
		{
			name: "invalid request object",
			body: `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`,
			want: []wantItem{{code: CodeInvalidRequest}},
		},
		{
			name:  "batch with invalid JSON",
			body:  "[\n  {\"jsonrpc\": \"2.0\", \"method\": \"sum\", \"params\": [1,2,4], \"id\": \"1\"},\n  {\"jsonrpc\": \"2.0\", \"method\"\n]",
			code:  CodeParseError,
			batch: false,
		},
		{
			name:  "empty array",
			body:  `[]`,
			batch: true,
			code:  CodeInvalidRequest,
		},
		{
			name:  "empty array with spaces",
			body:  " [ \n ] ",
			batch: true,
			code:  CodeInvalidRequest,
		},
		{
			name:  "non-empty invalid batch",
			body:  `[1]`,
			batch: true,
			want:  []wantItem{{code: CodeInvalidRequest}},
		},
		{
			name:  "invalid batch",
			body:  `[1,2,3]`,
			batch: true,
			want:  []wantItem{{code: CodeInvalidRequest}, {code: CodeInvalidRequest}, {code: CodeInvalidRequest}},
		},
		{
			name: "mixed batch",
			body: `[
				{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
				{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
				{"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
				{"foo": "boo"},
				{"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
				{"jsonrpc": "2.0", "method": "get_data", "id": "9"}
			]`,
			batch: true,
			want: []wantItem{
				{id: `"1"`, method: "sum", params: "[1,2,4]"},
				{method: "notify_hello", params: "[7]"},
				{id: `"2"`, method: "subtract", params: "[42,23]"},
				{code: CodeInvalidRequest},
				{id: `"5"`, method: "foo.get", params: `{"name": "myself"}`},
				{id: `"9"`, method: "get_data"},
			},
		},
		{
			name: "all notifications",
			body: `[
				{"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
				{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
			]`,
			batch: true,
			want:  []wantItem{{method: "notify_sum", params: "[1,2,4]"}, {method: "notify_hello", params: "[7]"}},
		},

		// Ids are echoed byte for byte.
		{name: "string id stays a string", body: `{"jsonrpc":"2.0","method":"m","id":"101"}`, want: []wantItem{{id: `"101"`, method: "m"}}},
		{name: "number id stays a number", body: `{"jsonrpc":"2.0","method":"m","id":101}`, want: []wantItem{{id: `101`, method: "m"}}},
		{name: "big integer id keeps every digit", body: `{"jsonrpc":"2.0","method":"m","id":12345678901234567890}`, want: []wantItem{{id: `12345678901234567890`, method: "m"}}},
		{name: "float id keeps its spelling", body: `{"jsonrpc":"2.0","method":"m","id":1.5e3}`, want: []wantItem{{id: `1.5e3`, method: "m"}}},
		{name: "negative id", body: `{"jsonrpc":"2.0","method":"m","id":-0.0}`, want: []wantItem{{id: `-0.0`, method: "m"}}},
		{name: "string id with escapes", body: `{"jsonrpc":"2.0","method":"m","id":"a\"b\u00e9"}`, want: []wantItem{{id: `"a\"b\u00e9"`, method: "m"}}},
		{name: "empty string id", body: `{"jsonrpc":"2.0","method":"m","id":""}`, want: []wantItem{{id: `""`, method: "m"}}},
		{name: "null id is a request", body: `{"jsonrpc":"2.0","method":"m","id":null}`, want: []wantItem{{id: `null`, method: "m"}}},
		{name: "absent id is a notification", body: `{"jsonrpc":"2.0","method":"m"}`, want: []wantItem{{method: "m"}}},
		{name: "id spacing is not kept", body: `{"jsonrpc":"2.0","method":"m","id" :  7 }`, want: []wantItem{{id: `7`, method: "m"}}},
		{name: "boolean id", body: `{"jsonrpc":"2.0","method":"m","id":true}`, want: []wantItem{{code: CodeInvalidRequest}}},
		{name: "object id", body: `{"jsonrpc":"2.0","method":"m","id":{}}`, want: []wantItem{{code: CodeInvalidRequest}}},
		{name: "array id", body: `{"jsonrpc":"2.0","method":"m","id":[1]}`, want: []wantItem{{code: CodeInvalidRequest}}},
		{name: "invalid request keeps a readable id", body: `{"jsonrpc":"1.0","method":"m","id":"x"}`, want: []wantItem{{id: `"x"`, code: CodeInvalidRequest}}},

		// Member names are case-sensitive.
		{name: "ID is not the id", body: `{"jsonrpc":"2.0","method":"m","ID":1}`, want: []wantItem{{method: "m"}}},
		{name: "Method is not the method", body: `{"jsonrpc":"2.0","Method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "JSONRPC is not jsonrpc", body: `{"JSONRPC":"2.0","method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "Params is not params", body: `{"jsonrpc":"2.0","method":"m","Params":7,"id":1}`, want: []wantItem{{id: "1", method: "m"}}},
		{name: "escaped member name is the name", body: `{"jsonrpc":"2.0","method":"m","\u0069d":1}`, want: []wantItem{{id: "1", method: "m"}}},
		{name: "repeated member counts last", body: `{"jsonrpc":"2.0","method":"a","method":"b","id":1}`, want: []wantItem{{id: "1", method: "b"}}},
		{name: "unknown members are ignored", body: `{"jsonrpc":"2.0","method":"m","x":{"y":[1,"]"]},"id":1}`, want: []wantItem{{id: "1", method: "m"}}},

		// params must be structured.
		{name: "params array", body: `{"jsonrpc":"2.0","method":"m","params":[],"id":1}`, want: []wantItem{{id: "1", method: "m", params: "[]"}}},
		{name: "params object", body: `{"jsonrpc":"2.0","method":"m","params":{},"id":1}`, want: []wantItem{{id: "1", method: "m", params: "{}"}}},
		{name: "params string", body: `{"jsonrpc":"2.0","method":"m","params":"bar","id":1}`, want: []wantItem{{id: "1", method: "m", code: CodeInvalidRequest}}},
		{name: "params number", body: `{"jsonrpc":"2.0","method":"m","params":3,"id":1}`, want: []wantItem{{id: "1", method: "m", code: CodeInvalidRequest}}},
		{name: "params null", body: `{"jsonrpc":"2.0","method":"m","params":null,"id":1}`, want: []wantItem{{id: "1", method: "m", code: CodeInvalidRequest}}},
		{name: "params true", body: `{"jsonrpc":"2.0","method":"m","params":true,"id":1}`, want: []wantItem{{id: "1", method: "m", code: CodeInvalidRequest}}},

		// jsonrpc must be exactly "2.0".
		{name: "jsonrpc missing", body: `{"method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "jsonrpc 1.0", body: `{"jsonrpc":"1.0","method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "jsonrpc number", body: `{"jsonrpc":2.0,"method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "jsonrpc with space", body: `{"jsonrpc":"2.0 ","method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "jsonrpc null", body: `{"jsonrpc":null,"method":"m","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},

		// method must be a string.
		{name: "method missing", body: `{"jsonrpc":"2.0","id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "method null", body: `{"jsonrpc":"2.0","method":null,"id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "method array", body: `{"jsonrpc":"2.0","method":["m"],"id":1}`, want: []wantItem{{id: "1", code: CodeInvalidRequest}}},
		{name: "method with escapes", body: `{"jsonrpc":"2.0","method":"a\u002eb","id":1}`, want: []wantItem{{id: "1", method: "a.b"}}},
		{name: "method empty string parses", body: `{"jsonrpc":"2.0","method":"","id":1}`, want: []wantItem{{id: "1", method: ""}}},

		// Bodies that are neither object nor array.
		{name: "empty body", body: ``, code: CodeParseError},
		{name: "blank body", body: " \n\t", code: CodeParseError},
		{name: "number body", body: `1`, code: CodeInvalidRequest},
		{name: "string body", body: `"hello"`, code: CodeInvalidRequest},
		{name: "null body", body: `null`, code: CodeInvalidRequest},
		{name: "trailing garbage", body: `{"jsonrpc":"2.0","method":"m"} x`, code: CodeParseError},
		{name: "two objects", body: `{"jsonrpc":"2.0","method":"m"}{"jsonrpc":"2.0","method":"m"}`, code: CodeParseError},
		{name: "surrounding whitespace", body: "\r\n {\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1} \n", want: []wantItem{{id: "1", method: "m"}}},
		{name: "batch of null", body: `[null]`, batch: true, want: []wantItem{{code: CodeInvalidRequest}}},
		{name: "batch of a batch", body: `[[{"jsonrpc":"2.0","method":"m","id":1}]]`, batch: true, want: []wantItem{{code: CodeInvalidRequest}}},

		// Limits.
		{name: "batch at its limit", body: `[1,2]`, lim: Limits{MaxBatchItems: 2}, batch: true, want: []wantItem{{code: CodeInvalidRequest}, {code: CodeInvalidRequest}}},
		{name: "batch over its limit", body: `[1,2,3]`, lim: Limits{MaxBatchItems: 2}, batch: true, code: CodeLimitExceeded},
		{name: "depth at its limit", body: `[{"jsonrpc":"2.0","method":"m","params":[1]}]`, lim: Limits{MaxDepth: 3}, batch: true, want: []wantItem{{method: "m", params: "[1]"}}},
		{name: "depth over its limit", body: `[{"jsonrpc":"2.0","method":"m","params":[[1]]}]`, lim: Limits{MaxDepth: 3}, code: CodeLimitExceeded},
		{name: "brackets in strings do not count", body: `{"jsonrpc":"2.0","method":"m","params":["[[[[\"{{"]}`, lim: Limits{MaxDepth: 2}, want: []wantItem{{method: "m", params: `["[[[[\"{{"]`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, batch, err := Parse([]byte(tt.body), tt.lim)
			if tt.code != 0 {
				if err == nil || err.Code != tt.code {
					t.Fatalf("Parse(%q) error = %v, want code %d", tt.body, err, tt.code)
				}
				if items != nil {
					t.Errorf("Parse(%q) items = %v, want none with an error", tt.body, gotItems(items))
				}
			} else if err != nil {
				t.Fatalf("Parse(%q) error = %v, want nil", tt.body, err)
			}
			if batch != tt.batch {
				t.Errorf("Parse(%q) batch = %v, want %v", tt.body, batch, tt.batch)
			}
			if got := gotItems(items); tt.code == 0 && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) = %v, want %v", tt.body, got, tt.want)
			}
			for _, it := range items {
				if (it.Request.ID == nil) != it.Request.IsNotification() {
					t.Errorf("Parse(%q): IsNotification() = %v for id %q", tt.body, it.Request.IsNotification(), it.Request.ID)
				}
			}
		})
	}
}

func TestParseErrorsMatchSentinels(t *testing.T) {
	tests := []struct {
		name string
		body string
		lim  Limits
		want error
	}{
		{name: "invalid JSON", body: `{`, want: ErrParse},
		{name: "empty batch", body: `[]`, want: ErrInvalidRequest},
		{name: "scalar body", body: `true`, want: ErrInvalidRequest},
		{name: "batch limit", body: `[1,2]`, lim: Limits{MaxBatchItems: 1}, want: ErrLimitExceeded},
		{name: "depth limit", body: `[[[]]]`, lim: Limits{MaxDepth: 2}, want: ErrLimitExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.body), tt.lim)
			if !errors.Is(err, tt.want) {
				t.Errorf("Parse(%q) = %v, want %v", tt.body, err, tt.want)
			}
		})
	}
}

func TestParseLimitData(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		lim   Limits
		limit string
		max   int64
		got   *int64
	}{
		{name: "max_batch_items", body: `[1,2,3]`, lim: Limits{MaxBatchItems: 2}, limit: "max_batch_items", max: 2, got: ptr(int64(3))},
		{name: "max_depth", body: `[[[[]]]]`, lim: Limits{MaxDepth: 3}, limit: "max_depth", max: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.body), tt.lim)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeLimitExceeded {
				t.Fatalf("Parse(%q) = %v, want code %d", tt.body, err, CodeLimitExceeded)
			}
			var data struct {
				Limit string `json:"limit"`
				Max   int64  `json:"max"`
				Got   *int64 `json:"got"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatalf("Parse(%q) data %s: %v", tt.body, e.Data, err)
			}
			if data.Limit != tt.limit || data.Max != tt.max || !reflect.DeepEqual(data.Got, tt.got) {
				t.Errorf("Parse(%q) data = %s, want limit %q, max %d, got %v", tt.body, e.Data, tt.limit, tt.max, tt.got)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseDoesNotAliasBody(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","method":"m","params":[1],"id":"abc"}`,
		`[{"jsonrpc":"2.0","method":"m","params":[1],"id":"abc"}]`,
	} {
		b := []byte(body)
		items, _, err := Parse(b, Limits{})
		if err != nil {
			t.Fatalf("Parse(%q) error = %v", body, err)
		}
		for i := range b {
			b[i] = 'x'
		}
		r := items[0].Request
		if string(r.ID) != `"abc"` || string(r.Params) != `[1]` || r.Method != "m" {
			t.Errorf("Parse(%q) after overwriting the body = %q %q %q, want the original values", body, r.ID, r.Method, r.Params)
		}
	}
}

func TestParseParseErrorOffset(t *testing.T) {
	body := `{"jsonrpc":"2.0",,}`
	_, _, err := Parse([]byte(body), Limits{})
	if !errors.Is(err, ErrParse) {
		t.Fatalf("Parse(%q) = %v, want %v", body, err, ErrParse)
	}
	var data struct{ Offset *int64 }
	if e := json.Unmarshal(err.Data, &data); e != nil || data.Offset == nil {
		t.Errorf("Parse(%q) data = %s, want an offset", body, err.Data)
	}
}

// TestSection7Responses checks the answers the specification expects for
// its batch examples, built the way the ingress builds them.
func TestSection7Responses(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		results map[string]string // method → result
		want    string            // "" when nothing is to be sent
	}{
		{
			name: "invalid batch",
			body: `[1,2,3]`,
			want: `[{"jsonrpc":"2.0","error":{"code":-32600},"id":null},{"jsonrpc":"2.0","error":{"code":-32600},"id":null},{"jsonrpc":"2.0","error":{"code":-32600},"id":null}]`,
		},
		{
			name: "mixed batch",
			body: `[
				{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
				{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
				{"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
				{"foo": "boo"},
				{"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
				{"jsonrpc": "2.0", "method": "get_data", "id": "9"}
			]`,
			results: map[string]string{"sum": "7", "subtract": "19", "get_data": `["hello",5]`},
			want: `[{"jsonrpc":"2.0","result":7,"id":"1"},{"jsonrpc":"2.0","result":19,"id":"2"},` +
				`{"jsonrpc":"2.0","error":{"code":-32600},"id":null},` +
				`{"jsonrpc":"2.0","error":{"code":-32601},"id":"5"},{"jsonrpc":"2.0","result":["hello",5],"id":"9"}]`,
		},
		{
			name: "all notifications",
			body: `[{"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, _, perr := Parse([]byte(tt.body), Limits{})
			if perr != nil {
				t.Fatalf("Parse(%q) error = %v", tt.body, perr)
			}
			var rs []Response
			for _, it := range items {
				switch {
				case it.Err != nil:
					rs = append(rs, Response{ID: it.Request.ID, Error: it.Err})
				case it.Request.IsNotification():
				case tt.results[it.Request.Method] != "":
					rs = append(rs, Response{ID: it.Request.ID, Result: json.RawMessage(tt.results[it.Request.Method])})
				default:
					rs = append(rs, Response{ID: it.Request.ID, Error: ErrMethodNotFound})
				}
			}
			if tt.want == "" {
				if len(rs) != 0 {
					t.Fatalf("Parse(%q) gave %d responses, want none", tt.body, len(rs))
				}
				return
			}
			b, err := AppendBatch(nil, rs)
			if err != nil {
				t.Fatalf("AppendBatch: %v", err)
			}
			if got, want := withoutMessages(t, b), withoutMessages(t, []byte(tt.want)); !reflect.DeepEqual(got, want) {
				t.Errorf("answer to %q = %s, want %s", tt.body, b, tt.want)
			}
		})
	}
}

// withoutMessages decodes a batch answer and drops the error messages, whose
// wording is toolbus's own.
func withoutMessages(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var rs []map[string]any
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	for _, r := range rs {
		if e, ok := r["error"].(map[string]any); ok {
			delete(e, "message")
		}
	}
	return rs
}

func TestResponseMarshalJSON(t *testing.T) {
	tests := []struct {
		name string
		r    Response
		want string
	}{
		{name: "result", r: Response{ID: json.RawMessage(`1`), Result: json.RawMessage(`19`)}, want: `{"jsonrpc":"2.0","result":19,"id":1}`},
		{name: "string id", r: Response{ID: json.RawMessage(`"101"`), Result: json.RawMessage(`{"a":[1]}`)}, want: `{"jsonrpc":"2.0","result":{"a":[1]},"id":"101"}`},
		{name: "big id", r: Response{ID: json.RawMessage(`12345678901234567890`), Result: json.RawMessage(`true`)}, want: `{"jsonrpc":"2.0","result":true,"id":12345678901234567890}`},
		{name: "float id", r: Response{ID: json.RawMessage(`1.5e3`), Result: json.RawMessage(`0`)}, want: `{"jsonrpc":"2.0","result":0,"id":1.5e3}`},
		{name: "nil id is null", r: Response{Error: ErrParse}, want: `{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"},"id":null}`},
		{name: "neither is a null result", r: Response{ID: json.RawMessage(`1`)}, want: `{"jsonrpc":"2.0","result":null,"id":1}`},
		{name: "error wins over result", r: Response{ID: json.RawMessage(`1`), Result: json.RawMessage(`1`), Error: ErrInternal}, want: `{"jsonrpc":"2.0","error":{"code":-32603,"message":"internal error"},"id":1}`},
		{
			name: "error with data",
			r:    Response{ID: json.RawMessage(`"a"`), Error: NewError(2001, `insufficient "funds"`, json.RawMessage(`{"balance":12.50}`))},
			want: `{"jsonrpc":"2.0","error":{"code":2001,"message":"insufficient \"funds\"","data":{"balance":12.50}},"id":"a"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.r.MarshalJSON()
			if err != nil || string(got) != tt.want {
				t.Fatalf("MarshalJSON() = %s, %v, want %s", got, err, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("MarshalJSON() = %s, not valid JSON", got)
			}
			viaStd, err := json.Marshal(tt.r)
			if err != nil || string(viaStd) != tt.want {
				t.Errorf("json.Marshal() = %s, %v, want %s", viaStd, err, tt.want)
			}
			prefix := []byte("prefix:")
			app, err := tt.r.AppendJSON(prefix)
			if err != nil || string(app) != "prefix:"+tt.want {
				t.Errorf("AppendJSON(%q) = %s, %v, want prefix:%s", prefix, app, err, tt.want)
			}
			var back Response
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("UnmarshalJSON(%s): %v", got, err)
			}
			again, _ := back.MarshalJSON()
			if tt.r.Result == nil && tt.r.Error == nil {
				return // a null result reads back as the bytes null
			}
			if string(again) != tt.want {
				t.Errorf("MarshalJSON(UnmarshalJSON(%s)) = %s, want %s", got, again, tt.want)
			}
		})
	}
}

func TestResponseUnmarshalJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Response
		wantErr bool
	}{
		{name: "result", in: `{"jsonrpc":"2.0","result": [1, 2],"id":"7"}`, want: Response{ID: json.RawMessage(`"7"`), Result: json.RawMessage(`[1, 2]`)}},
		{name: "error", in: `{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out","data":{"retryable":true}},"id":7}`,
			want: Response{ID: json.RawMessage(`7`), Error: &Error{Code: -32001, Message: "timed out", Data: json.RawMessage(`{"retryable":true}`)}}},
		{name: "null error is no error", in: `{"jsonrpc":"2.0","result":1,"error":null,"id":1}`, want: Response{ID: json.RawMessage(`1`), Result: json.RawMessage(`1`)}},
		{name: "null id", in: `{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"},"id":null}`, want: Response{ID: json.RawMessage(`null`), Error: &Error{Code: -32700, Message: "parse error"}}},
		{name: "not JSON", in: `{"jsonrpc"`, wantErr: true},
		{name: "error not an object", in: `{"error":"boom","id":1}`, wantErr: true},
		{name: "not an object", in: `[1]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Response
			err := got.UnmarshalJSON([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("UnmarshalJSON(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("UnmarshalJSON(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestAppendBatch(t *testing.T) {
	rs := []Response{
		{ID: json.RawMessage(`1`), Result: json.RawMessage(`"one"`)},
		{ID: json.RawMessage(`"2"`), Error: NewError(CodeTimeout, "timed out", map[string]any{"retryable": true})},
		{Error: ErrInvalidRequest},
	}
	got, err := AppendBatch([]byte("x"), rs)
	if err != nil {
		t.Fatal(err)
	}
	want := `x[{"jsonrpc":"2.0","result":"one","id":1},{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out","data":{"retryable":true}},"id":"2"},{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request"},"id":null}]`
	if string(got) != want {
		t.Fatalf("AppendBatch() = %s, want %s", got, want)
	}
	var back []Response
	if err := json.Unmarshal(got[1:], &back); err != nil {
		t.Fatalf("decode %s: %v", got[1:], err)
	}
	if len(back) != 3 || !reflect.DeepEqual(back[:2], rs[:2]) || !errors.Is(back[2].Error, ErrInvalidRequest) || string(back[2].ID) != "null" {
		t.Errorf("decode(AppendBatch()) = %+v, want %+v", back, rs)
	}
	if got, _ := AppendBatch(nil, nil); string(got) != "[]" {
		t.Errorf("AppendBatch(nil, nil) = %s, want []", got)
	}
}

func TestResponseMessageEscaping(t *testing.T) {
	for _, msg := range []string{"plain", `quote " and \ backslash`, "line\nbreak\ttab", "<html> & 'x'", "\x00\x1f", "bad utf8 \xff", "日本語"} {
		b, err := Response{ID: json.RawMessage(`1`), Error: &Error{Code: 1, Message: msg}}.MarshalJSON()
		if err != nil || !json.Valid(b) {
			t.Fatalf("MarshalJSON() with message %q = %s, %v, want valid JSON", msg, b, err)
		}
		var back Response
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if want := strings.ToValidUTF8(msg, "\uFFFD"); back.Error.Message != want {
			t.Errorf("message %q came back as %q, want %q", msg, back.Error.Message, want)
		}
	}
}

func TestScanJSON(t *testing.T) {
	tests := []struct {
		name string
		body string
		max  int
		want scanVerdict
	}{
		{name: "object", body: ` {"a" : [1, {"b":null}], "c":"d"} `, want: scanOK},
		{name: "scalars at the top", body: `"x"`, want: scanOK},
		{name: "numbers", body: `[0,-0,1.5,-2e10,3E+2,4e-2,10,0.0]`, want: scanOK},
		{name: "escapes", body: `"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"`, want: scanOK},
		{name: "literals", body: `[true,false,null]`, want: scanOK},
		{name: "empty containers", body: `[{},[],{"a":[]}]`, want: scanOK},
		{name: "multi-byte UTF-8", body: "\"\u00e9 \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80\"", want: scanOK},
		{name: "U+FFFD written out", body: "\"\xef\xbf\xbd\"", want: scanOK},
		{name: "depth at its limit", body: `[[{"a":1}]]`, max: 3, want: scanOK},
		{name: "depth over its limit", body: `[[{"a":[1]}]]`, max: 3, want: scanTooDeep},
		{name: "too deep before a syntax error", body: `[[[[ oops`, max: 3, want: scanTooDeep},
		{name: "syntax error before too deep", body: `[ oops [[[[`, max: 3, want: scanSyntax},
		{name: "invalid UTF-8 in a string", body: "[\"\xff\"]", want: scanUTF8},
		{name: "invalid UTF-8 in a member name", body: "{\"\xc3\":1}", want: scanUTF8},
		{name: "surrogate encoded in UTF-8", body: "\"\xed\xa0\x80\"", want: scanUTF8},
		{name: "invalid UTF-8 and a syntax error", body: "[\"\xff\",]", want: scanSyntax},
		{name: "non-ASCII outside a string", body: "[1,\xc3\xa9]", want: scanSyntax},
		{name: "empty", body: ``, want: scanSyntax},
		{name: "only whitespace", body: " \t\r\n", want: scanSyntax},
		{name: "two values", body: `{} {}`, want: scanSyntax},
		{name: "trailing comma", body: `[1,]`, want: scanSyntax},
		{name: "trailing comma in an object", body: `{"a":1,}`, want: scanSyntax},
		{name: "leading zero", body: `[01]`, want: scanSyntax},
		{name: "bare minus", body: `[-]`, want: scanSyntax},
		{name: "fraction without digits", body: `[1.]`, want: scanSyntax},
		{name: "exponent without digits", body: `[1e+]`, want: scanSyntax},
		{name: "plus sign", body: `[+1]`, want: scanSyntax},
		{name: "control character in a string", body: "\"a\nb\"", want: scanSyntax},
		{name: "unknown escape", body: `"\x41"`, want: scanSyntax},
		{name: "short unicode escape", body: `"\u12"`, want: scanSyntax},
		{name: "unicode escape that is not hex", body: `"\u12g4"`, want: scanSyntax},
		{name: "unterminated string", body: `["abc`, want: scanSyntax},
		{name: "unterminated array", body: `[1,2`, want: scanSyntax},
		{name: "mismatched close", body: `[1}`, want: scanSyntax},
		{name: "member without a name", body: `{1:2}`, want: scanSyntax},
		{name: "member without a colon", body: `{"a" 2}`, want: scanSyntax},
		{name: "truncated literal", body: `[tru]`, want: scanSyntax},
		{name: "literal with a tail", body: `[nullx]`, want: scanSyntax},
		{name: "byte order mark", body: "\xef\xbb\xbf{}", want: scanSyntax},
		{name: "close without open", body: `]`, want: scanSyntax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := scanJSON([]byte(tc.body), tc.max, nil); got != tc.want {
				t.Errorf("scanJSON(%q, %d) = %d, want %d", tc.body, tc.max, got, tc.want)
			}
			referenceVerdict(t, []byte(tc.body), tc.max)
		})
	}
}

// TestScanJSONDeep checks nesting past the scanner's first 256 levels,
// where it grows its record of what is open, with and without a limit.
func TestScanJSONDeep(t *testing.T) {
	for _, n := range []int{255, 256, 257, 1000} {
		deep := []byte(strings.Repeat(`{"a":[`, n) + `1` + strings.Repeat(`]}`, n))
		if got, _ := scanJSON(deep, 0, nil); got != scanOK {
			t.Errorf("scanJSON(%d levels of {\"a\":[...]}, 0) = %d, want %d", 2*n, got, scanOK)
		}
		if got, _ := scanJSON(deep, 2*n-1, nil); got != scanTooDeep {
			t.Errorf("scanJSON(%d levels, %d) = %d, want %d", 2*n, 2*n-1, got, scanTooDeep)
		}
		crossed := []byte(strings.Repeat(`{"a":[`, n) + `1` + strings.Repeat(`}]`, n))
		if got, _ := scanJSON(crossed, 0, nil); got != scanSyntax {
			t.Errorf("scanJSON(%d levels closed in the wrong order, 0) = %d, want %d", 2*n, got, scanSyntax)
		}
	}
}

// TestGarbageInMustReturn feeds random and truncated bytes to every decoder
// of the package: each must return, with a value or an error, and never
// panic.
func TestGarbageInMustReturn(t *testing.T) {
	valid := [][]byte{
		benchSingle,
		benchBatch(5),
		[]byte(`[{"jsonrpc":"2.0","method":"m","params":{"a":["\"]",{"b":null}]},"id":"x\\"},1,{"foo":"boo"}]`),
	}
	call, _ := MarshalCall(&CallEnvelope{ID: []byte(`"1"`), Method: "demo.echo", Params: []byte(`[1]`), Caller: "c"})
	reply, _ := MarshalReply(ReplyError(NewError(CodeTimeout, "timed out", map[string]any{"retryable": true})))
	valid = append(valid, call, reply)

	var inputs [][]byte
	for _, v := range valid {
		for i := range len(v) {
			inputs = append(inputs, v[:i], v[i:])
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte(`{}[]",:0123456789.eE+-truefalsn \\u"` + "\x00\x80\xc4\xa1\xde\xdf\xff")
	for range 3000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			if rng.IntN(2) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = byte(rng.UintN(256))
			}
		}
		inputs = append(inputs, b)
	}
	for _, v := range valid {
		for range 200 {
			b := bytes.Clone(v)
			b[rng.IntN(len(b))] = byte(rng.UintN(256))
			inputs = append(inputs, b)
		}
	}
	for _, b := range inputs {
		items, _, err := Parse(b, Limits{MaxBatchItems: 10, MaxDepth: 8})
		if err == nil && len(items) == 0 {
			t.Errorf("Parse(%q) returned neither items nor an error", b)
		}
		_, _ = UnmarshalCall(b)
		_, _ = UnmarshalReply(b)
		var r Response
		_ = r.UnmarshalJSON(b)
		referenceVerdict(t, b, 8)
		referenceVerdict(t, b, 0)
	}
}

// TestParseSteps: a batch is parsed in steps of StepElements elements in
// each pass, with the same items as Parse; a single request is one step.
func TestParseSteps(t *testing.T) {
	lim := Limits{MaxBatchItems: 200, MaxDepth: 8}
	tests := []struct {
		name  string
		body  []byte
		steps int
	}{
		// The check counts 32, 64 and 96; the decoding 32, 64 and 96,
		// before the last 4.
		{"100 elements", benchBatch(100), 6},
		// The check counts 32 and 64; the decoding 32, not after the
		// last.
		{"64 elements", benchBatch(64), 3},
		{"31 elements", benchBatch(31), 0},
		{"a single request", []byte(`{"jsonrpc":"2.0","method":"echo","id":1}`), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantBatch, wantErr := Parse(tc.body, lim)
			steps := 0
			got, batch, err := ParseSteps(tc.body, lim, func() { steps++ })
			if err != nil || wantErr != nil {
				t.Fatalf("ParseSteps = %v, Parse = %v; want both nil", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) || batch != wantBatch {
				t.Errorf("ParseSteps gave other items than Parse")
			}
			if steps != tc.steps {
				t.Errorf("step called %d times, want %d", steps, tc.steps)
			}
		})
	}
	// Past the batch limit the body is refused after the check, which
	// takes no more steps than a batch at the limit: a body of many tiny
	// elements does not make a caller wait step after step.
	for _, body := range [][]byte{benchBatch(300), []byte("[" + strings.Repeat("0,", 100_000) + "0]")} {
		steps := 0
		_, _, err := ParseSteps(body, lim, func() { steps++ })
		if err == nil || err.Code != CodeLimitExceeded {
			t.Fatalf("ParseSteps of a body past the limit of 200 = %v, want %d", err, CodeLimitExceeded)
		}
		if want := lim.MaxBatchItems / StepElements; steps != want {
			t.Errorf("step called %d times for the check of a body past the limit, want %d", steps, want)
		}
	}
}
