package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestRetryAdvice(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
		after     time.Duration
	}{
		{name: "retryable data", err: schema.NewError(schema.CodeTimeout, "t", map[string]any{"retryable": true}), retryable: true},
		{name: "wrapped", err: fmt.Errorf("x: %w", schema.NewError(schema.CodeUnavailable, "u", map[string]any{"retryable": true})), retryable: true},
		{name: "retryable false", err: schema.NewError(schema.CodeTimeout, "t", map[string]any{"retryable": false})},
		{name: "overloaded with retry_after_ms", err: schema.NewError(schema.CodeOverloaded, "o", map[string]any{"retry_after_ms": 250}), retryable: true, after: 250 * time.Millisecond},
		{name: "overloaded without", err: schema.NewError(schema.CodeOverloaded, "o", map[string]any{"limit": "x"})},
		{name: "retry_after_ms on another code", err: schema.NewError(2001, "b", map[string]any{"retry_after_ms": 5}), after: 5 * time.Millisecond},
		{name: "no data", err: schema.ErrTimeout},
		{name: "data not an object", err: schema.NewError(schema.CodeTimeout, "t", []int{1})},
		{name: "retryable transport", err: &TransportError{Op: "post", Retryable: true}, retryable: true},
		{name: "other transport", err: &TransportError{Op: "post"}},
		{name: "context", err: context.DeadlineExceeded},
		{name: "missing response", err: ErrMissingResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retryable, after := retryAdvice(tc.err)
			if retryable != tc.retryable || after != tc.after {
				t.Errorf("retryAdvice(%v) = %v, %s, want %v, %s", tc.err, retryable, after, tc.retryable, tc.after)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, Base: 100 * time.Millisecond, Max: time.Second}
	for _, tc := range []struct {
		name string
		n    int
		full time.Duration
	}{
		{name: "first", n: 1, full: 100 * time.Millisecond},
		{name: "second", n: 2, full: 200 * time.Millisecond},
		{name: "fourth", n: 4, full: 800 * time.Millisecond},
		{name: "capped", n: 5, full: time.Second},
		{name: "far", n: 60, full: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 100 {
				if got := p.backoff(tc.n); got < tc.full/2 || got > tc.full {
					t.Fatalf("backoff(%d) = %s, want within [%s, %s]", tc.n, got, tc.full/2, tc.full)
				}
			}
		})
	}
	for range 100 {
		if got := jitter(time.Second); got < 750*time.Millisecond || got > 1250*time.Millisecond {
			t.Fatalf("jitter(1s) = %s, want within [750ms, 1.25s]", got)
		}
	}
}

func TestTransportErrorMessage(t *testing.T) {
	err := &TransportError{Op: "post", URL: "http://h/rpc", StatusCode: 502, ContentType: "text/html",
		Err: fmt.Errorf("%w: not JSON-RPC: %q", ErrInvalidResponse, "<html>")}
	want := `client: post http://h/rpc: HTTP 502 Bad Gateway (text/html): invalid response: not JSON-RPC: "<html>"`
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrTransport) || !errors.Is(err, ErrInvalidResponse) {
		t.Errorf("%v matches neither ErrTransport nor its cause", err)
	}
}
