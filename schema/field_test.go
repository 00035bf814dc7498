package schema

import "testing"

func TestFieldPointer(t *testing.T) {
	tests := []struct {
		name  string
		field string
		want  string
	}{
		{name: "no member", field: "", want: ""},
		{name: "bare name", field: "ms", want: "/ms"},
		{name: "pointer kept", field: "/items/0/name", want: "/items/0/name"},
		{name: "root pointer kept", field: "/", want: "/"},
		{name: "slash escaped", field: "a/b", want: "/a~1b"},
		{name: "tilde escaped", field: "a~b", want: "/a~0b"},
		{name: "tilde before one escaped once", field: "~1", want: "/~01"},
		{name: "dots are part of the name", field: "message.id", want: "/message.id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FieldPointer(tt.field); got != tt.want {
				t.Errorf("FieldPointer(%q) = %q, want %q", tt.field, got, tt.want)
			}
		})
	}
}

func TestPointer(t *testing.T) {
	tests := []struct {
		name   string
		tokens []string
		want   string
	}{
		{name: "whole value", tokens: nil, want: ""},
		{name: "one member", tokens: []string{"ms"}, want: "/ms"},
		{name: "nested", tokens: []string{"items", "0", "name"}, want: "/items/0/name"},
		{name: "escaped tokens", tokens: []string{"a/b", "c~d"}, want: "/a~1b/c~0d"},
		{name: "empty member name", tokens: []string{""}, want: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Pointer(tt.tokens...); got != tt.want {
				t.Errorf("Pointer(%q) = %q, want %q", tt.tokens, got, tt.want)
			}
		})
	}
}
