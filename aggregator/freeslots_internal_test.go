package aggregator

import (
	"fmt"
	"testing"
	"time"
)

// The scheduler's pressure and free slots are kept by method; a worker serving
// a pattern can be called by any number of names, so entries gone stale
// are swept out once there are many, and the maps stay bounded.
func TestFreeSlotsForgetStaleMethods(t *testing.T) {
	s := newFreeSlots()
	now := time.Now()
	stale := now.Add(-time.Hour)
	for i := range 3 * maxMethodsTracked {
		m := fmt.Sprintf("math.m%d", i)
		s.pressedAt[m] = stale
		s.free[m] = []freeSlot{{direct: "toolbus.direct.w", at: stale}}
	}
	// A slot named now, and a refusal now, sweep the stale ones.
	s.freed("math.fresh", "toolbus.direct.w", now)
	cl := &call{method: "math.fresh", busy: &busyRefusals{first: momentOf(now)}}
	s.refuse(cl, now)
	s.leaveLine(cl)
	if len(s.pressedAt) != 1 || len(s.free) != 1 {
		t.Fatalf("after a sweep: %d methods pressed, %d with free slots; want only math.fresh in each", len(s.pressedAt), len(s.free))
	}
	if !s.pressed("math.fresh", now) {
		t.Error("math.fresh, refused just now, is not pressed")
	}
	if to, ok := s.take("math.fresh", now); !ok || to != "toolbus.direct.w" {
		t.Errorf("take(math.fresh) = %q, %v; want the slot named just now", to, ok)
	}
}
