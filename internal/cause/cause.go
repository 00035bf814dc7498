// Package cause finds the innermost error of a chain, such as "permission
// denied" of "mkdir /x: permission denied", for the sentences toolbus
// writes that name the path or the address themselves and add what to do.
package cause

import "errors"

// Root returns the innermost error of err: err itself when it wraps
// nothing, and nil for nil.
func Root(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}
