package aggregator

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// The inbox's pressure and free slots are kept by method; a worker serving
// a pattern can be called by any number of names, so entries gone stale
// are swept out once there are many, and the maps stay bounded.
func TestInboxForgetsStaleMethods(t *testing.T) {
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	in := &inbox{subjects: subjects, waiting: map[string]*pending{}, refused: map[string][]*pending{},
		pressedAt: map[string]time.Time{}, free: map[string][]freeSlot{}, deaf: map[string]time.Time{}}
	stale := time.Now().Add(-time.Hour)
	for i := range 3 * maxMethodsTracked {
		m := fmt.Sprintf("math.m%d", i)
		in.pressedAt[m] = stale
		in.free[m] = []freeSlot{{direct: "toolbus.direct.w", at: stale}}
	}
	// A slot named now, and a refusal now, sweep the stale ones.
	in.freed("math.fresh", "toolbus.direct.w", 1)
	p := &pending{method: "math.fresh", direct: make(chan string, 1)}
	in.refuse(p, time.Now())
	in.unrefuse(p)
	if len(in.pressedAt) != 1 || len(in.free) != 1 {
		t.Fatalf("after a sweep: %d methods pressed, %d with free slots; want only math.fresh in each", len(in.pressedAt), len(in.free))
	}
	if !in.pressed("math.fresh") {
		t.Error("math.fresh, refused just now, is not pressed")
	}
	if to, ok := in.takeFree("math.fresh"); !ok || to != "toolbus.direct.w" {
		t.Errorf("takeFree(math.fresh) = %q, %v; want the slot named just now", to, ok)
	}
}
