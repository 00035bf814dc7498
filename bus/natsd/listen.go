package natsd

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// checkListen tries addr before the server does, so that an address in
// use is refused with a sentence that says what to change (fix), before
// anything is made on disk.
func checkListen(addr, fix string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return &listenError{addr: addr, fix: fix, err: err}
	}
	return l.Close()
}

// listenError is an address the server cannot listen on.
type listenError struct {
	addr string
	fix  string // what to do about it, naming the flag or the file's item
	err  error
}

func (e *listenError) Error() string {
	switch {
	case errors.Is(e.err, syscall.EADDRINUSE):
		return fmt.Sprintf("%s is already in use by another program: stop it, or %s", e.addr, e.fix)
	case errors.Is(e.err, syscall.EACCES):
		return fmt.Sprintf("listening on %s needs privileges this process lacks: %s", e.addr, e.fix)
	}
	return fmt.Sprintf("cannot listen on %s (%v): %s", e.addr, rootCause(e.err), e.fix)
}

func (e *listenError) Unwrap() error { return e.err }

// rootCause returns the innermost error of err, such as "permission
// denied" of "mkdir /x: permission denied", for sentences that name the
// path or address themselves.
func rootCause(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}
