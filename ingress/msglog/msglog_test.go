package msglog

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func newLog(t *testing.T, c Config) *Log {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v) error = %v", c, err)
	}
	return l
}

func TestNewInvalid(t *testing.T) {
	for _, c := range []Config{
		{Methods: []string{"bad..name"}},
		{Methods: []string{"echo"}, MaxBytes: -1},
		{Methods: []string{"echo"}, Redact: []string{""}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) error = nil, want an error", c)
		}
	}
}

func TestLogs(t *testing.T) {
	var none *Log
	if none.Logs("echo") {
		t.Error("a nil Log logs echo, want nothing logged")
	}
	l := newLog(t, Config{Methods: []string{"echo", "math.*"}})
	for _, tc := range []struct {
		method string
		want   bool
	}{{"echo", true}, {"math.add", true}, {"math.vec.add", false}, {"sum", false}} {
		if got := l.Logs(tc.method); got != tc.want {
			t.Errorf("Logs(%s) = %v, want %v", tc.method, got, tc.want)
		}
	}
}

// attrs returns the attributes of Body by key.
func attrs(as []slog.Attr) map[string]slog.Value {
	m := map[string]slog.Value{}
	for _, a := range as {
		m[a.Key] = a.Value
	}
	return m
}

func TestBody(t *testing.T) {
	l := newLog(t, Config{Methods: []string{">"}, MaxBytes: 100, Redact: []string{"password", "Token"}})
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{name: "nothing to hide", raw: `{"user": "ann",  "n": 1.50}`, want: `{"user": "ann",  "n": 1.50}`},
		{name: "at any depth, any case", raw: `{"password":"hunter2","a":[{"TOKEN":"t"}]}`,
			want: `{"a":[{"TOKEN":"[REDACTED]"}],"password":"[REDACTED]"}`},
		{name: "numbers keep their spelling", raw: `{"token":1,"n":12345678901234567890}`,
			want: `{"n":12345678901234567890,"token":"[REDACTED]"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := attrs(l.Body(json.RawMessage(tc.raw)))
			b, ok := got["body"].Any().(json.RawMessage)
			if !ok || string(b) != tc.want {
				t.Errorf("Body(%s) = %s, want %s", tc.raw, b, tc.want)
			}
		})
	}
	if got := attrs(l.Body(nil)); got["body"].Any() != nil {
		t.Errorf("Body(nil) = %v, want a nil body", got)
	}
}

func TestBodyTruncated(t *testing.T) {
	l := newLog(t, Config{Methods: []string{">"}, MaxBytes: 10})
	raw := `"` + strings.Repeat("é", 20) + `"` // 42 bytes; byte 10 is inside a rune
	got := attrs(l.Body(json.RawMessage(raw)))
	body := got["body"].String()
	if body != raw[:9] || !got["truncated"].Bool() || got["body_bytes"].Int64() != int64(len(raw)) {
		t.Errorf("Body(%d bytes) = %v, want the first 9 bytes (a whole rune), truncated and the full size", len(raw), got)
	}
}

func TestHideFailedValue(t *testing.T) {
	l := newLog(t, Config{Redact: []string{"password"}})
	invalid := func(field string) *schema.Error {
		return schema.NewError(schema.CodeInvalidParams, "invalid params: "+field+": 'hunter2' does not match",
			map[string]any{"field": field, "reason": "'hunter2' does not match", "method": "login"})
	}
	hidden := l.HideFailedValue(invalid("/user/Password"))
	if strings.Contains(hidden.Message, "hunter2") || strings.Contains(string(hidden.Data), "hunter2") ||
		hidden.Reason() != Redacted || hidden.Code != schema.CodeInvalidParams {
		t.Errorf("HideFailedValue(/user/Password) = %v %s, want the value hidden", hidden, hidden.Data)
	}
	var data map[string]any
	if err := json.Unmarshal(hidden.Data, &data); err != nil || data["method"] != "login" {
		t.Errorf("HideFailedValue data = %s, want the other members kept", hidden.Data)
	}
	for _, e := range []*schema.Error{
		invalid("/user/name"),
		schema.NewError(schema.CodeToolError, "tool failed: hunter2", map[string]any{"field": "/password"}),
	} {
		if got := l.HideFailedValue(e); got != e {
			t.Errorf("HideFailedValue(%v) = %v, want it unchanged", e, got)
		}
	}
	var none *Log
	if e := invalid("/password"); none.HideFailedValue(e) != e {
		t.Error("a nil Log changed an error, want it unchanged")
	}
}
