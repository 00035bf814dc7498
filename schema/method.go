package schema

import "strings"

// MaxMethodBytes is the longest method name the bus accepts.
const MaxMethodBytes = 200

// ReservedPrefix starts the method names that the ingress answers itself;
// JSON-RPC reserves them for extensions and they are never routed to workers.
const ReservedPrefix = "rpc."

// ValidateMethod checks a method name against the grammar of the bus: tokens
// separated by '.', each token made of A-Z a-z 0-9 _ - / :, no empty token, at
// most [MaxMethodBytes] bytes. A name that passes can never be a NATS wildcard
// nor reach a subject outside the prefix. The error is a [CodeMethodNotFound]
// [*Error] whose data says what is wrong.
func ValidateMethod(method string) error {
	reason := methodProblem(method)
	if reason == "" {
		return nil
	}
	return NewError(CodeMethodNotFound, "method not found: invalid method name: "+reason,
		map[string]any{"reason": ReasonInvalidMethodName, "detail": reason})
}

func methodProblem(m string) string {
	if m == "" {
		return "empty"
	}
	if len(m) > MaxMethodBytes {
		return "longer than 200 bytes"
	}
	tokenLen := 0
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c == '.':
			if tokenLen == 0 {
				return "empty token"
			}
			tokenLen = 0
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '-', c == '/', c == ':':
		default:
			return "character not allowed: " + quoteByte(c)
		}
		tokenLen++
	}
	if tokenLen == 0 {
		return "empty token"
	}
	return ""
}

func quoteByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		const hex = "0123456789abcdef"
		return "0x" + string([]byte{hex[c>>4], hex[c&0xf]})
	}
	return "'" + string(c) + "'"
}

// IsReserved reports whether method is one of the ingress's own (rpc.*).
func IsReserved(method string) bool {
	return strings.HasPrefix(method, ReservedPrefix)
}
