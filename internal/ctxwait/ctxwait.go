// Package ctxwait holds the one wait that ends early with its context,
// which the job runner's retries, the client's backoff, the conformance
// kit and the bench all use.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d, or less when ctx ends first; it reports whether it waited
// all of d. A d of zero or less returns at once, true unless ctx has
// ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
