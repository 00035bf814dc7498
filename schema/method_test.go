package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestValidateMethod(t *testing.T) {
	tests := []struct {
		name   string
		method string
		detail string // "" when the name is valid
	}{
		{name: "simple", method: "echo"},
		{name: "dotted", method: "math.add"},
		{name: "every allowed character", method: "AZaz09_-/:.x"},
		{name: "specification example", method: "notify_hello"},
		{name: "reserved is still valid grammar", method: "rpc.jobs.get"},
		{name: "single character tokens", method: "a.b.c"},
		{name: "200 bytes", method: strings.Repeat("a", 200)},
		{name: "200 bytes with dots", method: strings.Repeat("ab.", 66) + "ab"},
		{name: "empty", method: "", detail: "empty"},
		{name: "201 bytes", method: strings.Repeat("a", 201), detail: "longer than 200 bytes"},
		{name: "leading dot", method: ".a", detail: "empty token"},
		{name: "trailing dot", method: "a.", detail: "empty token"},
		{name: "double dot", method: "a..b", detail: "empty token"},
		{name: "only a dot", method: ".", detail: "empty token"},
		{name: "star wildcard", method: "math.*", detail: "character not allowed: '*'"},
		{name: "tail wildcard", method: "math.>", detail: "character not allowed: '>'"},
		{name: "space", method: "a b", detail: "character not allowed: ' '"},
		{name: "tab", method: "a\tb", detail: "character not allowed: 0x09"},
		{name: "newline", method: "a\nb", detail: "character not allowed: 0x0a"},
		{name: "NUL", method: "a\x00", detail: "character not allowed: 0x00"},
		{name: "DEL", method: "a\x7f", detail: "character not allowed: 0x7f"},
		{name: "non-ASCII", method: "café", detail: "character not allowed: 0xc3"},
		{name: "dollar", method: "$SYS", detail: "character not allowed: '$'"},
		{name: "quote", method: `a"b`, detail: `character not allowed: '"'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateMethod(tt.method)
			if tt.detail == "" {
				if err != nil {
					t.Errorf("ValidateMethod(%q) = %v, want nil", tt.method, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrMethodNotFound) {
				t.Fatalf("ValidateMethod(%q) = %v, want %v", tt.method, err, ErrMethodNotFound)
			}
			var data struct{ Reason, Detail string }
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatalf("ValidateMethod(%q) data %s: %v", tt.method, e.Data, err)
			}
			if data.Reason != "invalid_method_name" || data.Detail != tt.detail {
				t.Errorf("ValidateMethod(%q) data = %+v, want detail %q", tt.method, data, tt.detail)
			}
		})
	}
}

func TestIsReserved(t *testing.T) {
	tests := []struct {
		method string
		want   bool
	}{
		{"rpc.jobs.submit", true}, {"rpc.", true}, {"rpc", false}, {"RPC.x", false}, {"rpcx.y", false}, {"math.rpc.x", false},
	}
	for _, tt := range tests {
		if got := IsReserved(tt.method); got != tt.want {
			t.Errorf("IsReserved(%q) = %v, want %v", tt.method, got, tt.want)
		}
	}
}

func TestFitMethodName(t *testing.T) {
	tests := []struct {
		name, prefix, tool, want string
		ok                       bool
	}{
		{"plain", "", "read_file", "read_file", true},
		{"prefixed", "fs", "read_file", "fs.read_file", true},
		{"dots kept", "", "a.b", "a.b", true},
		{"empty tokens dropped", "", ".a..b.", "a.b", true},
		{"bad bytes replaced", "", "héllo wörld", "h_llo_w_rld", true},
		{"reserved", "", "rpc.discover", "", false},
		{"reserved under prefix is fine", "x", "rpc.discover", "x.rpc.discover", true},
		{"nothing left", "", "...", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FitMethodName(tt.prefix, tt.tool)
			if got != tt.want || ok != tt.ok {
				t.Errorf("FitMethodName(%q, %q) = %q, %v; want %q, %v", tt.prefix, tt.tool, got, ok, tt.want, tt.ok)
			}
		})
	}
}
