package aggregator

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/toolbus/toolbus/schema"
)

// TestBreakerOpenTime runs a method's circuit through its states on the
// fake clock of a synctest bubble: open after the failures in a row,
// refusing until OpenFor has passed, then closed by a successful trial.
func TestBreakerOpenTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &breakers{cfg: Breaker{Failures: 2, OpenFor: time.Minute, Trials: 1}, by: map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]{}}
		reached := 0
		healthy := false
		roundTrip := func() ([]byte, *schema.Error) {
			reached++
			if healthy {
				return []byte(`"up"`), nil
			}
			return nil, schema.NewError(schema.CodeUnavailable, "unavailable", nil)
		}
		call := func() *schema.Error {
			done, refused := b.allow("down")
			if refused != nil {
				return refused
			}
			_, e := roundTrip()
			done(e)
			return e
		}
		call()
		call()
		if e := call(); e.Reason() != schema.ReasonCircuitOpen || reached != 2 {
			t.Fatalf("third call = %v after %d round trips, want circuit_open after 2", e, reached)
		}
		healthy = true
		time.Sleep(time.Minute - time.Second)
		if e := call(); e.Reason() != schema.ReasonCircuitOpen || reached != 2 {
			t.Fatalf("a call before OpenFor = %v after %d round trips, want circuit_open", e, reached)
		}
		time.Sleep(2 * time.Second)
		if e := call(); e != nil || reached != 3 {
			t.Fatalf("the trial after OpenFor = %v after %d round trips, want a result from the worker", e, reached)
		}
		if e := call(); e != nil || reached != 4 {
			t.Fatalf("after the trial = %v after %d round trips, want the circuit closed", e, reached)
		}
	})
}
