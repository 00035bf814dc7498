package ingress

import "fmt"

// DefaultMaxBytesInFlight bounds the bytes of answers the ingress holds
// for its clients, received from the workers and not written yet
// (max_bytes_in_flight). Each named caller may hold half of it by default
// ([WithCallerMaxBytesInFlight]).
const DefaultMaxBytesInFlight int64 = 512 << 20

// WithMaxBytesInFlight bounds the bytes of answers the ingress holds, over
// all callers, between their arrival from the dispatcher and their write
// to the client (default [DefaultMaxBytesInFlight]). See
// [WithCallerMaxBytesInFlight] for what happens at the bound.
func WithMaxBytesInFlight(n int64) Option {
	return func(c *config) error {
		if n < 1<<20 {
			return fmt.Errorf("ingress: max bytes in flight must be at least 1 MiB, got %d", n)
		}
		c.maxBytes = n
		return nil
	}
}

// WithCallerMaxBytesInFlight bounds the bytes of answers the ingress holds
// for one named caller (default: half of [WithMaxBytesInFlight]). A caller
// holding half its bound or more has its new calls refused -32002
// (retryable, retry_after_ms, limit caller_max_bytes_in_flight) until its
// answers are written, which leaves the other half for the answers of the
// calls it has running; an answer that arrives and does not fit all the
// same is dropped and answered in its place -32002 with may_have_run true,
// since the call ran. Without authentication every call is the one anonymous caller's,
// whose share is the whole of [WithMaxBytesInFlight], under the limit
// max_bytes_in_flight.
//
// An answer is held from its arrival until its transport wrote it with
// the rest of its message: the request's whole answer for POST /rpc, REST
// and event streams, each message for a WebSocket (whose connection has a
// bound of its own, see [WithWebSocketMaxUnsentBytes]), and an MCP answer
// until it is handed to the MCP session.
func WithCallerMaxBytesInFlight(n int64) Option {
	return func(c *config) error {
		if n < 1<<10 {
			return fmt.Errorf("ingress: caller max bytes in flight must be at least 1 KiB, got %d", n)
		}
		c.callerMaxBytes = n
		return nil
	}
}
