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

// Codes turns error codes into bounded metric label values: every code of
// the range JSON-RPC and toolbus reserve (-32768 to -32000) is its own
// label, and so are the first [DefaultMaxCodes] other codes seen (a tool's
// business codes such as 2001); later ones are [OtherCode]. The zero value
// is ready to use and safe for concurrent use.
type Codes struct {
	mu   sync.RWMutex
	seen map[int]string
}

// Label returns the label of code.
func (c *Codes) Label(code int) string {
	if code >= -32768 && code <= -32000 {
		return strconv.Itoa(code)
	}
	c.mu.RLock()
	l, ok := c.seen[code]
	c.mu.RUnlock()
	if ok {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.seen[code]; ok {
		return l
	}
	if c.seen == nil {
		c.seen = map[int]string{}
	}
	if len(c.seen) >= DefaultMaxCodes {
		return OtherCode
	}
	l = strconv.Itoa(code)
	c.seen[code] = l
	return l
}
