// Package listen opens the TCP addresses toolbus's servers listen on, and
// says in one sentence why it cannot: an address in use, one that needs
// privileges, or another cause, each with what to do about it. The
// commands that start servers (toolbus dev, ingress, worker, nats) share
// it, so that every such refusal reads the same.
package listen

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/toolbus/toolbus/internal/cause"
)

// Check tries addr before a server does, so that an address in use is
// reported as such, with fix (what to change, naming the flag or the
// configuration item), rather than as a server that never becomes
// ready, and before anything is made on disk.
func Check(addr, fix string) error {
	l, err := Open(addr, fix)
	if err != nil {
		return err
	}
	return l.Close()
}

// Open opens addr for a server, or returns an [*Error] that says in one
// sentence why it cannot and, with fix, what to do.
func Open(addr, fix string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &Error{Addr: addr, Fix: fix, Err: err}
	}
	return l, nil
}

// Error is an address a server cannot listen on.
type Error struct {
	Addr string
	// Fix says what to do about it, naming the flag or the file's item.
	Fix string
	Err error
}

func (e *Error) Error() string {
	switch {
	case errors.Is(e.Err, syscall.EADDRINUSE):
		return fmt.Sprintf("%s is already in use by another program: stop it, or %s", e.Addr, e.Fix)
	case errors.Is(e.Err, syscall.EACCES):
		return fmt.Sprintf("listening on %s needs privileges this process lacks: %s", e.Addr, e.Fix)
	}
	return fmt.Sprintf("cannot listen on %s (%v): %s", e.Addr, cause.Root(e.Err), e.Fix)
}

// Unwrap returns the listen error itself.
func (e *Error) Unwrap() error { return e.Err }
