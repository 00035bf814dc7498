package client

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
)

// Errors of the client itself. JSON-RPC errors that a server answered are
// [*schema.Error] values instead, returned as they came.
var (
	// ErrTransport is matched by every [*TransportError] under [errors.Is]:
	// the message or its answer was lost on the way, whatever the cause.
	ErrTransport = errors.New("client: transport failure")
	// ErrInvalidResponse means an answer is not JSON-RPC 2.0: not JSON, not
	// response objects, or a response with both or neither of result and
	// error.
	ErrInvalidResponse = errors.New("client: invalid response")
	// ErrMissingResponse is the outcome of a call whose id no response of
	// the answer carries. Only that call fails; the others of its batch keep
	// their own outcomes.
	ErrMissingResponse = errors.New("client: no response for the call")
	// ErrDuplicateResponse means two responses of one answer carry the same
	// id. The call of that id fails with it, since neither response can be
	// trusted over the other.
	ErrDuplicateResponse = errors.New("client: duplicate response id")
	// ErrUnknownResponse means a response carries an id that no call of the
	// message had.
	ErrUnknownResponse = errors.New("client: response with an unknown id")
	// ErrConnectionLost means a WebSocket connection ended while a call
	// waited for its answer: the server closed it, the network failed, or
	// the server stopped answering pings. It comes wrapped in a retryable
	// [*TransportError].
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrClosed means the [Client] was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNotSent is the outcome of a [Future] whose batch has not been sent.
	ErrNotSent = errors.New("client: batch not sent")
)

// TransportError is a failure to deliver a message or to read its answer.
// It matches [ErrTransport] under [errors.Is] and unwraps to its cause.
type TransportError struct {
	// Op is what failed: "post", "read", "dial", "write" or "websocket".
	Op string
	// URL is the endpoint.
	URL string
	// StatusCode is the HTTP status of an answer that was not JSON-RPC; zero
	// when no answer was read.
	StatusCode int
	// ContentType is the Content-Type of such an answer.
	ContentType string
	// Retryable reports whether the message can be sent again safely: it
	// never left the client, or the connection it was sent on was lost.
	// Only retryable transport errors are retried by [WithRetry].
	Retryable bool
	// Err is the cause.
	Err error
}

var _ error = (*TransportError)(nil)

// Error names the operation, the endpoint, the status when there was one,
// and the cause. A connection nothing accepted, or a host that does not
// resolve, is said as such, with what to do.
func (e *TransportError) Error() string {
	var dns *net.DNSError
	switch {
	case e.StatusCode == 0 && errors.Is(e.Err, syscall.ECONNREFUSED):
		return "client: nothing accepts connections at " + e.URL + " (connection refused): start the toolbus ingress there or correct the URL"
	case e.StatusCode == 0 && errors.As(e.Err, &dns) && dns.IsNotFound:
		return "client: the host of " + e.URL + " does not resolve (" + dns.Name + "): correct the URL"
	}
	var b strings.Builder
	b.WriteString("client: ")
	b.WriteString(e.Op)
	b.WriteString(" ")
	b.WriteString(e.URL)
	if e.StatusCode != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.StatusCode))
		if t := http.StatusText(e.StatusCode); t != "" {
			b.WriteString(" ")
			b.WriteString(t)
		}
		if e.ContentType != "" {
			b.WriteString(" (")
			b.WriteString(e.ContentType)
			b.WriteString(")")
		}
	}
	if e.Err != nil {
		b.WriteString(": ")
		// The cause is often one of this package's errors: say "client:"
		// once.
		b.WriteString(strings.TrimPrefix(e.Err.Error(), "client: "))
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrTransport].
func (e *TransportError) Is(target error) bool { return target == ErrTransport }
