package natsd

import "errors"

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
