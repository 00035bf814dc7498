package fair_test

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/fair"
)

// cpuClock is a process's CPU time that the test sets: busy is the share
// of the one core that the process used since the last step.
type cpuClock struct{ used time.Duration }

func (c *cpuClock) step(d time.Duration, busy float64) {
	c.used += time.Duration(float64(d) * busy)
}

// measured returns a window of cfg whose scheduler reads its CPU time from
// the clock it also returns, on one core.
func measured(t *testing.T, cfg fair.Config) (*window, *cpuClock) {
	t.Helper()
	w := newWindow(t, cfg)
	cpu := &cpuClock{}
	w.s.MeasureCPU(func() time.Duration { return cpu.used }, 1)
	return w, cpu
}

// finishInside finishes, at the window's time, every entry that was
// inside when it was called (not those it lets in meanwhile).
func (w *window) finishInside() {
	for range len(w.inside) {
		e := w.inside[0]
		w.inside = w.inside[1:]
		w.take(w.s.Done(w.now, e))
	}
}

// paced drives a window of 50 seats through steps of a millisecond, in
// which every entry inside is finished and the core was busy for the
// given share, and returns what was admitted in each step after the
// first period.
func paced(t *testing.T, flows []string, busy func(step int) float64, steps int) []int {
	t.Helper()
	w, cpu := measured(t, fair.Config{Seats: 50, CPUTarget: 0.85})
	for _, f := range flows {
		w.enqueue(fair.Flow{Name: f}, 10000, 1)
	}
	var admitted []int
	for i := range steps {
		before := len(w.order)
		cpu.step(time.Millisecond, busy(i))
		w.now = w.now.Add(time.Millisecond)
		w.finishInside()
		w.take(w.s.Tick(w.now))
		admitted = append(admitted, len(w.order)-before)
	}
	return admitted
}

func sum(ns []int) int {
	s := 0
	for _, n := range ns {
		s += n
	}
	return s
}

// TestPacing checks that two flows on a saturated core are admitted at a
// pace that falls while the core stays saturated, that the pace never
// changes their order, and that one flow alone, or a core with room to
// spare, is never paced.
func TestPacing(t *testing.T) {
	saturated := func(int) float64 { return 1 }
	spare := func(int) float64 { return 0.5 }

	two := paced(t, []string{"flood", "victim"}, saturated, 300)
	first, last := sum(two[20:40]), sum(two[280:300])
	if last >= first || last < 20*50/4 {
		t.Errorf("admissions of two flows on a saturated core: %d in the first 20 ms after the first period, %d in the last 20; want fewer, and at least a quarter of the unpaced %d", first, last, 20*50)
	}

	alone := paced(t, []string{"flood"}, saturated, 100)
	if n := sum(alone[20:40]); n != 20*50 {
		t.Errorf("admissions of one flow alone on a saturated core = %d in 20 ms, want every seat every step (%d): a flow alone is never paced", n, 20*50)
	}
	room := paced(t, []string{"flood", "victim"}, spare, 100)
	if n := sum(room[20:40]); n != 20*50 {
		t.Errorf("admissions of two flows on a half-busy core = %d in 20 ms, want every seat every step (%d)", n, 20*50)
	}

	// The order is the fair one, paced or not: the two flows alternate.
	w, cpu := measured(t, fair.Config{Seats: 2, CPUTarget: 0.85})
	w.enqueue(fair.Flow{Name: "a"}, 500, 1)
	w.enqueue(fair.Flow{Name: "b"}, 500, 1)
	for range 100 {
		cpu.step(time.Millisecond, 1)
		w.finishOldest(time.Millisecond)
		if at, ok := w.s.NextWake(); ok && at.After(w.now) {
			w.now = at
		}
		w.take(w.s.Tick(w.now))
	}
	got := count(w.order[len(w.order)-40:])
	if got["a"] < 18 || got["b"] < 18 {
		t.Errorf("the last 40 admissions of two flows while paced = %v, want about half each", got)
	}
}

// TestPacingTarget checks that pacing is off by default (the CPU target
// 1), and that a target out of range is refused.
func TestPacingTarget(t *testing.T) {
	w, cpu := measured(t, fair.Config{Seats: 1000, FlowMaxQueued: 100000})
	w.enqueue(fair.Flow{Name: "a"}, 60000, 1)
	w.enqueue(fair.Flow{Name: "b"}, 60000, 1)
	for range 100 {
		cpu.step(time.Millisecond, 1)
		w.now = w.now.Add(time.Millisecond)
		w.finishInside()
	}
	if n := len(w.order); n != 101*1000 {
		t.Errorf("admissions with the default CPUTarget in 100 steps = %d, want every seat at the start and every step (%d): nothing paced", n, 101*1000)
	}
	for _, target := range []float64{-0.1, 1.5} {
		if _, err := fair.New[string](fair.Config{CPUTarget: target}); err == nil {
			t.Errorf("New with CPUTarget %v = nil error, want it refused", target)
		}
	}
}
