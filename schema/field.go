package schema

import (
	"strings"
)

// pointerEscaper escapes a reference token of a JSON pointer (RFC 6901,
// section 3): "~" first, so that the "~" of "~1" is not escaped again.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// Pointer returns the JSON pointer (RFC 6901) made of tokens, each escaped:
// Pointer("items", "0", "a/b") is "/items/0/a~1b". No tokens is "", the
// pointer of the whole value.
func Pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// FieldPointer returns what data.field holds for field, the member of the
// params an error is about: always a JSON pointer into the params, as the
// ingress's schema validation writes it. A field that starts with "/" is a
// pointer already and is returned as it is; any other non-empty field is the
// name of one member of the params object, so "ms" becomes "/ms" and "a/b"
// becomes "/a~1b". "" (no member named) stays "".
func FieldPointer(field string) string {
	if field == "" || strings.HasPrefix(field, "/") {
		return field
	}
	return Pointer(field)
}
