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
