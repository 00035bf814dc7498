package fair_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/fair"
)

// twin drives two schedulers of one config with the same operations: one
// always queues (Enqueue), the other tries AdmitAlone first, as the
// ingress does, and queues only what it refused.
type twin struct {
	t      *testing.T
	queued *fair.Scheduler[string]
	alone  *fair.Scheduler[string]
	now    time.Time
	// inside are the entries in each window, oldest admission first;
	// order the values each admitted, in order.
	insideQ, insideA []*fair.Entry[string]
	orderQ, orderA   []string
	// atOnce counts the entries AdmitAlone took.
	atOnce int
}

func newTwin(t *testing.T, cfg fair.Config) *twin {
	q, err := fair.New[string](cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fair.New[string](cfg)
	return &twin{t: t, queued: q, alone: a, now: t0}
}

func (w *twin) takeQ(m fair.Moves[string]) {
	for _, e := range m.Admitted {
		w.insideQ, w.orderQ = append(w.insideQ, e), append(w.orderQ, e.Value)
	}
	if m.AwaitPoll {
		w.takeQ(w.queued.Polled(w.now))
	}
}

func (w *twin) takeA(m fair.Moves[string]) {
	for _, e := range m.Admitted {
		w.insideA, w.orderA = append(w.insideA, e), append(w.orderA, e.Value)
	}
	if m.AwaitPoll {
		w.takeA(w.alone.Polled(w.now))
	}
}

// send gives both schedulers n entries of f, named after their sender and
// number.
func (w *twin) send(f fair.Flow, n int, seq *int) {
	qs := make([]*fair.Entry[string], n)
	as := make([]fair.Entry[string], n)
	for i := range n {
		v := fmt.Sprintf("%s%d", f.Name, *seq)
		*seq++
		qs[i] = &fair.Entry[string]{Value: v, Cost: 1, Deadline: w.now.Add(time.Second)}
		as[i] = fair.Entry[string]{Value: v, Cost: 1, Deadline: w.now.Add(time.Second)}
	}
	_, m := w.queued.Enqueue(w.now, f, qs)
	w.takeQ(m)
	if w.alone.AdmitAlone(w.now, f, as) {
		w.atOnce += n
		for i := range as {
			w.insideA, w.orderA = append(w.insideA, &as[i]), append(w.orderA, as[i].Value)
		}
		return
	}
	ptrs := make([]*fair.Entry[string], n)
	for i := range as {
		ptrs[i] = &as[i]
	}
	_, m = w.alone.Enqueue(w.now, f, ptrs)
	w.takeA(m)
}

// finish moves the clock by d and finishes entry i of each window.
func (w *twin) finish(i int, d time.Duration) {
	w.now = w.now.Add(d)
	e := w.insideQ[i]
	w.insideQ = slices.Delete(w.insideQ, i, i+1)
	w.takeQ(w.queued.Done(w.now, e))
	e = w.insideA[i]
	w.insideA = slices.Delete(w.insideA, i, i+1)
	w.takeA(w.alone.Done(w.now, e))
}

// same fails the test unless both schedulers admitted the same entries
// in the same order and show the same window and flows.
func (w *twin) same(step int) {
	w.t.Helper()
	if !slices.Equal(w.orderQ, w.orderA) {
		w.t.Fatalf("step %d: admitted through the queue %v, with AdmitAlone %v", step, w.orderQ, w.orderA)
	}
	sq, sa := w.queued.Stats(w.now), w.alone.Stats(w.now)
	byName := func(a, b fair.FlowStats) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	}
	slices.SortFunc(sq.Flows, byName)
	slices.SortFunc(sa.Flows, byName)
	if sq.Used != sa.Used || sq.Waiting != sa.Waiting || sq.Hold != sa.Hold || sq.Rounds != sa.Rounds || !slices.Equal(sq.Flows, sa.Flows) {
		w.t.Fatalf("step %d: the window through the queue is %+v, with AdmitAlone %+v", step, sq, sa)
	}
}

// TestAdmitAloneIsEnqueueAtOnce drives a lone caller, with now and then a
// second caller's burst, through two schedulers: one queues everything,
// the other admits with AdmitAlone whenever it may. Every admission, in
// order, the window's counts and the flows' must be the same, before and
// after the second caller comes and goes: AdmitAlone skips the queue, not
// the scheduling.
func TestAdmitAloneIsEnqueueAtOnce(t *testing.T) {
	for _, cfg := range []fair.Config{{Seats: 8}, {Seats: 8, Round: 2}, {Seats: 4, Round: -1}, {Seats: 16, HoldMin: time.Millisecond, HoldMax: 5 * time.Millisecond}} {
		t.Run(fmt.Sprintf("seats=%d,round=%d", cfg.Seats, cfg.Round), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(cfg.Seats)))
			w := newTwin(t, cfg)
			seqA, seqB := 0, 0
			for step := range 3000 {
				switch k := r.IntN(100); {
				case k < 45:
					w.send(fair.Flow{Name: "a"}, 1+r.IntN(3), &seqA)
				case k < 48:
					w.send(fair.Flow{Name: "b", Weight: 2}, 1+r.IntN(12), &seqB)
				case k < 50:
					// Long enough for b to stop competing.
					w.now = w.now.Add(time.Second)
				default:
					if len(w.insideQ) > 0 {
						w.finish(r.IntN(len(w.insideQ)), time.Duration(r.IntN(500))*time.Microsecond)
					}
				}
				w.same(step)
			}
			if w.atOnce == 0 {
				t.Fatal("AdmitAlone admitted nothing: the test did not try it")
			}
			if w.atOnce == seqA+seqB {
				t.Fatal("AdmitAlone admitted everything: the test never made it refuse")
			}
		})
	}
}

// TestAdmitAloneRefuses checks each reason AdmitAlone leaves entries to
// the queue, and that it leaves them untouched.
func TestAdmitAloneRefuses(t *testing.T) {
	one := func(deadline time.Time) []fair.Entry[string] {
		return []fair.Entry[string]{{Value: "x", Cost: 1, Deadline: deadline}}
	}
	tests := []struct {
		name    string
		setup   func(w *window)
		flow    fair.Flow
		entries func(w *window) []fair.Entry[string]
	}{
		{name: "another flow has entries queued", setup: func(w *window) {
			w.enqueue(fair.Flow{Name: "b"}, 5, 1) // 4 seats: one waits
		}, flow: fair.Flow{Name: "a"}},
		{name: "its own queue is not empty", setup: func(w *window) {
			w.enqueue(fair.Flow{Name: "a"}, 5, 1)
		}, flow: fair.Flow{Name: "a"}},
		{name: "the seats are too few", setup: func(w *window) {
			w.enqueue(fair.Flow{Name: "a"}, 3, 1)
		}, flow: fair.Flow{Name: "a"}, entries: func(w *window) []fair.Entry[string] {
			return make([]fair.Entry[string], 2)
		}},
		{name: "another flow was admitted lately", setup: func(w *window) {
			w.enqueue(fair.Flow{Name: "b"}, 1, 1)
			w.finishOldest(time.Millisecond)
		}, flow: fair.Flow{Name: "a"}},
		{name: "exempt", flow: fair.Flow{Name: "ops", Exempt: true}},
		{name: "past its deadline", flow: fair.Flow{Name: "a"}, entries: func(w *window) []fair.Entry[string] {
			return one(w.now)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWindow(t, fair.Config{Seats: 4})
			if tc.setup != nil {
				tc.setup(w)
			}
			es := one(time.Time{})
			if tc.entries != nil {
				es = tc.entries(w)
			}
			before := w.s.Stats(w.now)
			if w.s.AdmitAlone(w.now, tc.flow, es) {
				t.Fatal("AdmitAlone admitted, want it to refuse")
			}
			for i := range es {
				if !es[i].Admitted().IsZero() || !es[i].Enqueued().IsZero() {
					t.Errorf("entry %d was touched: admitted %v, enqueued %v", i, es[i].Admitted(), es[i].Enqueued())
				}
			}
			if after := w.s.Stats(w.now); after.Used != before.Used || len(after.Flows) != len(before.Flows) {
				t.Errorf("the window moved: %+v before, %+v after", before, after)
			}
		})
	}
	// And alone, it admits: the seats are counted and given back.
	w := newWindow(t, fair.Config{Seats: 4})
	es := one(w.now.Add(time.Second))
	if !w.s.AdmitAlone(w.now, fair.Flow{Name: "a"}, es) {
		t.Fatal("AdmitAlone refused a flow alone in an empty window")
	}
	if st := w.s.Stats(w.now); st.Used != 1 || len(st.Flows) != 1 || st.Flows[0].Inside != 1 {
		t.Errorf("after AdmitAlone the window is %+v, want one seat used by a", st)
	}
	if got := es[0].Admitted(); !got.Equal(w.now) {
		t.Errorf("Admitted() = %v, want %v", got, w.now)
	}
	w.s.Done(w.now, &es[0])
	if st := w.s.Stats(w.now); st.Used != 0 || len(st.Flows) != 0 {
		t.Errorf("after Done the window is %+v, want it empty", st)
	}
}
