package fair

import (
	"strconv"
	"testing"
	"time"
)

// TestIdleFlowsAreKeptAndBounded: a caller with one call at a time keeps
// its flow, forgotten as if new between its calls; flows with nothing
// queued or inside are swept once the map is large, and busy ones never.
func TestIdleFlowsAreKeptAndBounded(t *testing.T) {
	s, err := New[int](Config{Seats: 4096, Round: -1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	call := func(name string) *Entry[int] {
		e := &Entry[int]{Cost: 1}
		if n, m := s.Enqueue(now, Flow{Name: name}, []*Entry[int]{e}); n != 1 || len(m.Admitted) != 1 {
			t.Fatalf("Enqueue(%s) = %d, %d admitted; want 1, 1", name, n, len(m.Admitted))
		}
		return e
	}
	var first *flow[int]
	for range 3 {
		e := call("alice")
		if first == nil {
			first = e.flow
		} else if e.flow != first {
			t.Fatalf("alice's calls one at a time made a new flow for each")
		}
		s.Done(now, e)
		if fl := s.flows["alice"]; fl != first || !fl.idle() || fl.lastFinish != 0 {
			t.Fatalf("alice after her call: flow %+v, want the same flow, idle, its finish tag forgotten", fl)
		}
	}
	if st := s.Stats(now); len(st.Flows) != 0 {
		t.Errorf("Stats().Flows = %+v, want none: the idle flow is not shown", st.Flows)
	}

	// Busy flows, each with a call inside, are never swept.
	busy := make([]*Entry[int], 0, 2*idleFlowsSwept)
	for i := range 2 * idleFlowsSwept {
		busy = append(busy, call("busy-"+strconv.Itoa(i)))
	}
	// Idle flows are, however many callers come and go.
	for i := range 5 * idleFlowsSwept {
		s.Done(now, call("once-"+strconv.Itoa(i)))
	}
	for i, e := range busy {
		if s.flows["busy-"+strconv.Itoa(i)] != e.flow {
			t.Fatalf("busy-%d's flow was swept while its call was inside", i)
		}
	}
	if n := len(s.flows); n > 2*idleFlowsSwept+2*(2*idleFlowsSwept) {
		t.Errorf("%d flows in the map with %d busy, want the idle ones swept", n, len(busy))
	}
	for _, e := range busy {
		s.Done(now, e)
	}
	for i := range 3 * idleFlowsSwept {
		s.Done(now, call("later-"+strconv.Itoa(i)))
	}
	if n := len(s.flows); n > 2*(2*idleFlowsSwept) {
		t.Errorf("%d flows in the map once all are idle, want at most %d", n, 2*(2*idleFlowsSwept))
	}
}
