package callstats

import (
	"strconv"
	"sync"
)

// DefaultMaxCodes is how many error codes outside the JSON-RPC range a
// [Codes] names apart.
const DefaultMaxCodes = 64

// OtherCode is the label of the codes past the cap.
const OtherCode = "other"

// capped hands out a label for each of the first max keys it is asked
// for, and other for every later one, so that what clients send cannot
// grow a metric's series without bound. Its zero value is ready; it is
// safe for concurrent use.
type capped[K comparable] struct {
	mu   sync.RWMutex
	seen map[K]string
}

// get returns the label of k: its own (made by name) while fewer than max
// keys have one, else other.
func (c *capped[K]) get(k K, max int, name func(K) string, other string) string {
	c.mu.RLock()
	l, ok := c.seen[k]
	c.mu.RUnlock()
	if ok {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.seen[k]; ok {
		return l
	}
	if len(c.seen) >= max {
		return other
	}
	if c.seen == nil {
		c.seen = map[K]string{}
	}
	l = name(k)
	c.seen[k] = l
	return l
}

// Codes turns error codes into bounded metric label values: every code of
// the range JSON-RPC and toolbus reserve (-32768 to -32000) is its own
// label, and so are the first [DefaultMaxCodes] other codes seen (a tool's
// business codes such as 2001); later ones are [OtherCode]. The zero value
// is ready to use and safe for concurrent use.
type Codes struct{ set capped[int] }

// Label returns the label of code.
func (c *Codes) Label(code int) string {
	if code >= -32768 && code <= -32000 {
		return strconv.Itoa(code)
	}
	return c.set.get(code, DefaultMaxCodes, strconv.Itoa, OtherCode)
}

// Names hands out at most Max distinct names as labels; calls of later
// names share Other. The zero value of the set is ready once Max and
// Other are set; it is safe for concurrent use.
type Names struct {
	Max   int
	Other string
	set   capped[string]
}

// Label returns name, or Other once Max other names have labels.
func (n *Names) Label(name string) string {
	return n.set.get(name, n.Max, func(s string) string { return s }, n.Other)
}
