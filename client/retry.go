package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of [RetryPolicy].
const (
	DefaultRetryBase = 100 * time.Millisecond
	DefaultRetryMax  = 10 * time.Second
)

// RetryPolicy says how [WithRetry] retries.
//
// A call is retried only when retrying is known to be what the server
// wants or known to be safe:
//   - a JSON-RPC error whose data says "retryable": true (timeouts, an
//     unavailable method);
//   - a -32002 overloaded error whose data has "retry_after_ms";
//   - a [*TransportError] marked Retryable: the message never left the
//     client, or its WebSocket connection was lost.
//
// Every other error is final, and a notification is never retried, nor is
// a batch re-sent whole when it holds one. The wait before a retry is the
// error's retry_after_ms when it has one; otherwise it grows exponentially
// from Base to Max, with jitter. Retries stop after MaxAttempts attempts, or
// as soon as the context would end before the next attempt could start.
type RetryPolicy struct {
	// MaxAttempts is the most attempts per call, the first included; 1
	// means no retry. It must be at least 1.
	MaxAttempts int
	// Base is the wait before the first retry; zero means
	// [DefaultRetryBase].
	Base time.Duration
	// Max bounds every wait but one that the server asked for with
	// retry_after_ms; zero means [DefaultRetryMax].
	Max time.Duration
}

func (p RetryPolicy) check() error {
	if p.MaxAttempts < 1 || p.Base < 0 || p.Max < 0 || (p.Max > 0 && p.Max < p.Base) {
		return fmt.Errorf("client: invalid RetryPolicy %+v: want MaxAttempts >= 1 and 0 <= Base <= Max", p)
	}
	return nil
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Base == 0 {
		p.Base = DefaultRetryBase
	}
	if p.Max == 0 {
		p.Max = max(DefaultRetryMax, p.Base)
	}
	return p
}

// backoff returns the wait before retry n (1 for the first): Base doubled
// n-1 times, at most Max, of which the upper half is random so that clients
// that failed together do not come back together.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}

// retryAdvice reads what an error says about retrying it: whether it may
// be retried, and the wait the server asked for (zero when it asked for
// none).
func retryAdvice(err error) (retryable bool, after time.Duration) {
	var te *TransportError
	if errors.As(err, &te) {
		return te.Retryable, 0
	}
	var se *schema.Error
	if !errors.As(err, &se) || len(se.Data) == 0 || !bytes.HasPrefix(bytes.TrimSpace(se.Data), []byte("{")) {
		return false, 0
	}
	var data struct {
		Retryable    bool     `json:"retryable"`
		RetryAfterMS *float64 `json:"retry_after_ms"`
	}
	if json.Unmarshal(se.Data, &data) != nil {
		return false, 0
	}
	if data.RetryAfterMS != nil && *data.RetryAfterMS > 0 {
		after = time.Duration(*data.RetryAfterMS * float64(time.Millisecond))
	}
	return data.Retryable || (se.Code == schema.CodeOverloaded && data.RetryAfterMS != nil), after
}

// sleep waits d, or less when ctx ends first; it reports whether the whole
// wait passed. A wait that would outlast ctx's deadline is not started.
func sleep(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	return ctxwait.Sleep(ctx, d)
}
