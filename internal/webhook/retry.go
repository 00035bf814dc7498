package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/internal/egress"
)

// MaxAttempts is the most attempts a [Retry] may allow.
const MaxAttempts = 50

// Outcomes of [Sender.Deliver] other than an attempt's failure.
var (
	// ErrStopped: the delivery was stopped between two attempts, by its
	// [Delivery.Wait] or its context; it has not failed, and may be taken
	// up again from the attempts made.
	ErrStopped = errors.New("webhook: delivery stopped between attempts")
	// ErrSpent: the delivery had no attempt left to make when Deliver was
	// called ([Delivery.Tried] reached the retry's attempts).
	ErrSpent = errors.New("webhook: no attempt of the delivery is left")
)

// Retry is how many attempts a delivery gets and how long it waits
// between them: Min before the second attempt, doubled before each
// further one, at most Max. Attempts must be 1 to [MaxAttempts]; Min and
// Max must satisfy 0 < Min <= Max when there is more than one attempt.
type Retry struct {
	Attempts int
	Min, Max time.Duration
}

func (r Retry) validate() error {
	if r.Attempts < 1 || r.Attempts > MaxAttempts {
		return fmt.Errorf("webhook: attempts must be 1 to %d, got %d", MaxAttempts, r.Attempts)
	}
	if r.Attempts > 1 && (r.Min <= 0 || r.Min > r.Max) {
		return fmt.Errorf("webhook: backoff must satisfy 0 < min <= max, got %v and %v", r.Min, r.Max)
	}
	return nil
}

// Backoff is the wait after attempt n (counted from 1) before the next:
// Min doubled per attempt after the first, at most Max.
func (r Retry) Backoff(n int) time.Duration {
	d := r.Min
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

// Attempt is what one attempt of a delivery came to.
type Attempt struct {
	// N counts the delivery's attempts from 1, those made before Deliver
	// ([Delivery.Tried]) included.
	N int
	// At is when the attempt ended, on the sender's clock.
	At time.Time
	// Err is why the attempt failed; nil when it succeeded. Its text may
	// quote the receiver: it is for the operator's log, and a caller is
	// shown only Class.
	Err error
	// Class is Err's class; "" when the attempt succeeded.
	Class egress.Class
	// Last says that no attempt follows: this one succeeded, or it was
	// the last the retry allows, and the delivery has failed for good.
	Last bool
}

// Deliver makes the attempts of d left after d.Tried until one succeeds
// or the sender's [Retry] allows no more, waiting between them, and
// reports each to d.Report. It returns nil when an attempt succeeded;
// the last attempt's error when every attempt failed (its class is
// [egress.Classify]'s); an error wrapping [ErrStopped] when a wait was
// given up; and [ErrSpent] when no attempt was left to make. ctx bounds
// the attempts and the waits.
func (s *Sender) Deliver(ctx context.Context, d Delivery) error {
	wait := d.Wait
	if wait == nil {
		wait = ctxwait.Sleep
	}
	n := max(d.Tried, 0)
	if n >= s.retry.Attempts {
		return ErrSpent
	}
	for {
		if n > 0 && !wait(ctx, s.retry.Backoff(n)) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
			return ErrStopped
		}
		n++
		err := s.send(ctx, &d)
		last := err == nil || n >= s.retry.Attempts
		if d.Report != nil {
			d.Report(Attempt{N: n, At: s.now(), Err: err, Class: egress.Classify(err), Last: last})
		}
		if last {
			return err
		}
	}
}
