package worker

import "strings"

// overlaps reports whether some method name matches both patterns, where a
// '*' token matches any one token and a last '>' any one or more.
func overlaps(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			// The other pattern has a token here, so it has the one or more
			// tokens '>' needs, whatever follows.
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
	return len(at) == len(bt)
}

// matches reports whether method, a concrete name, is served by pattern.
func matches(pattern, method string) bool {
	pt, mt := strings.Split(pattern, "."), strings.Split(method, ".")
	for i, p := range pt {
		if p == ">" {
			return i == len(pt)-1 && len(mt) > i
		}
		if i >= len(mt) || (p != "*" && p != mt[i]) {
			return false
		}
	}
	return len(pt) == len(mt)
}
