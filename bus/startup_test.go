package bus_test

import (
	"log/slog"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// TestStartupReadyOnlyOnceBegun checks that a part done before the others
// have said what they wait for does not make the process ready.
func TestStartupReadyOnlyOnceBegun(t *testing.T) {
	st := bus.NewStartup(slog.New(slog.DiscardHandler))
	isReady := func() bool {
		select {
		case <-st.Ready():
			return true
		default:
			return false
		}
	}
	st.Wait("nats", "connecting")
	st.Done("nats")
	if isReady() {
		t.Fatal("ready before begin, with nothing waited for yet")
	}
	st.Wait("jobs", "waiting for JetStream")
	st.Begin()
	if isReady() || st.Err() == nil {
		t.Fatalf("ready while jobs waits (err %v)", st.Err())
	}
	st.Done("jobs")
	if !isReady() || st.Err() != nil {
		t.Fatalf("not ready with nothing waited for (err %v)", st.Err())
	}
	// A part that waits again later makes the process not ready again,
	// and ready stays closed.
	st.Wait("nats", "not connected")
	if st.Err() == nil || !isReady() {
		t.Errorf("Err() = %v after NATS went away, want a reason", st.Err())
	}
}
