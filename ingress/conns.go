package ingress

import "fmt"

// Defaults of the connection limits of [Server.Serve].
const (
	// DefaultMaxHeaderBytes bounds the request line and headers of one
	// request (max_header_bytes): room for a long JWT and then some.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConnsPerAddr bounds the open connections of one client
	// address (max_conns_per_addr): well above a benchmark's few hundred
	// clients on one host.
	DefaultMaxConnsPerAddr = 1024
)

// WithMaxHeaderBytes bounds the request line and headers of a request the
// server started by [Server.Serve] reads (default [DefaultMaxHeaderBytes]).
// Go's HTTP server answers a larger one "431 Request Header Fields Too
// Large" before any handler or authentication runs, and closes the
// connection; toolbus_limit_refusals_total counts it as max_header_bytes.
func WithMaxHeaderBytes(n int) Option {
	return func(c *config) error {
		if n < 1<<10 {
			return fmt.Errorf("ingress: max header bytes must be at least 1024, got %d", n)
		}
		c.maxHeaderBytes = n
		return nil
	}
}

// WithMaxConnsPerAddr bounds the connections one client IP address has
// open at once on [Server.Serve]'s listeners, WebSocket connections
// included (default [DefaultMaxConnsPerAddr]); zero turns the bound off,
// as behind a proxy that carries every client on connections of its own.
// A connection over it is answered at once with 429, a -32002 body naming
// max_conns_per_addr and Retry-After, and closed unread.
func WithMaxConnsPerAddr(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("ingress: max connections per address must not be negative, got %d", n)
		}
		c.maxConnsPerAddr = n
		return nil
	}
}
