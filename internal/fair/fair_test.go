package fair_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/fair"
)

// t0 is the start of every test's clock, which only the test moves.
var t0 = time.Unix(1_700_000_000, 0)

// window drives a scheduler on a clock moved by hand, and keeps the
// entries it let in, oldest first, and the values of all it admitted.
type window struct {
	t       *testing.T
	s       *fair.Scheduler[string]
	now     time.Time
	inside  []*fair.Entry[string]
	order   []string
	expired []string
	// manual leaves the network polls to the test (see polled); without
	// it, a round that ends is followed by a poll at once, as on a core
	// with time to spare.
	manual bool
	// awaiting is set when a round ended and no poll followed yet.
	awaiting bool
}

func newWindow(t *testing.T, cfg fair.Config) *window {
	t.Helper()
	s, err := fair.New[string](cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	return &window{t: t, s: s, now: t0}
}

func (w *window) take(m fair.Moves[string]) {
	for _, e := range m.Admitted {
		w.inside = append(w.inside, e)
		w.order = append(w.order, e.Value)
	}
	for _, e := range m.Expired {
		w.expired = append(w.expired, e.Value)
	}
	if m.AwaitPoll {
		w.awaiting = true
		if !w.manual {
			w.polled()
		}
	}
}

// polled tells the scheduler that the network was polled.
func (w *window) polled() {
	w.awaiting = false
	w.take(w.s.Polled(w.now))
}

// enqueue queues n entries of cost for f and returns how many were taken.
func (w *window) enqueue(f fair.Flow, n int, cost float64) int {
	es := make([]*fair.Entry[string], n)
	for i := range es {
		es[i] = &fair.Entry[string]{Value: f.Name, Cost: cost}
	}
	k, m := w.s.Enqueue(w.now, f, es)
	w.take(m)
	return k
}

// finishOldest moves the clock by d and finishes the oldest entry inside.
func (w *window) finishOldest(d time.Duration) {
	w.t.Helper()
	if len(w.inside) == 0 {
		w.t.Fatalf("the window is empty after %d admissions", len(w.order))
	}
	w.now = w.now.Add(d)
	e := w.inside[0]
	w.inside = w.inside[1:]
	w.take(w.s.Done(w.now, e))
}

// run finishes entries a millisecond apart until n more were admitted,
// and returns their values.
func (w *window) run(n int) []string {
	w.t.Helper()
	from := len(w.order)
	for len(w.order) < from+n {
		w.finishOldest(time.Millisecond)
	}
	return w.order[from : from+n]
}

func count(values []string) map[string]int {
	c := map[string]int{}
	for _, v := range values {
		c[v]++
	}
	return c
}

func TestShares(t *testing.T) {
	type flowSpec struct {
		name    string
		weight  float64
		cost    float64
		n       int // entries queued
		batches int // how many Enqueue calls they come in
	}
	tests := []struct {
		name  string
		flows []flowSpec
		seats int
		serve int
		want  map[string]int
	}{
		{
			name: "batches of 500 against calls one at a time",
			flows: []flowSpec{
				{name: "flood", cost: 1, n: 2000, batches: 4},
				{name: "victim", cost: 1, n: 200, batches: 200},
			},
			seats: 4, serve: 200, want: map[string]int{"flood": 100, "victim": 100},
		},
		{
			name: "weights 1 and 3",
			flows: []flowSpec{
				{name: "light", weight: 1, cost: 1, n: 1000, batches: 1},
				{name: "heavy", weight: 3, cost: 1, n: 1000, batches: 1},
			},
			seats: 8, serve: 400, want: map[string]int{"light": 100, "heavy": 300},
		},
		{
			name: "large params cost more",
			flows: []flowSpec{
				{name: "bytes", cost: fair.Cost(3 * fair.CostUnit), n: 1000, batches: 10},
				{name: "calls", cost: fair.Cost(10), n: 1000, batches: 1},
			},
			seats: 2, serve: 500, want: map[string]int{"bytes": 100, "calls": 400},
		},
		{
			name: "three callers",
			flows: []flowSpec{
				{name: "a", cost: 1, n: 900, batches: 1},
				{name: "b", cost: 1, n: 900, batches: 300},
				{name: "c", cost: 1, n: 900, batches: 9},
			},
			seats: 16, serve: 900, want: map[string]int{"a": 300, "b": 300, "c": 300},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(t, fair.Config{Seats: tt.seats, FlowMaxQueued: 1 << 20})
			// The flows' batches arrive interleaved, the first flow's
			// first batch taking the whole window.
			for b := 0; ; b++ {
				sent := false
				for _, f := range tt.flows {
					if b >= f.batches {
						continue
					}
					sent = true
					per := f.n / f.batches
					if n := w.enqueue(fair.Flow{Name: f.name, Weight: f.weight}, per, f.cost); n != per {
						t.Fatalf("Enqueue of %d entries of %s queued %d", per, f.name, n)
					}
				}
				if !sent {
					break
				}
			}
			got := count(w.run(tt.serve))
			for name, want := range tt.want {
				if d := got[name] - want; d < -2 || d > 2 {
					t.Errorf("%s got %d of %d admissions, want %d (±2); all: %v", name, got[name], tt.serve, want, got)
				}
			}
		})
	}
}

// TestNewcomerWaitsForOneSeat: a flow that turns busy while another has
// thousands queued takes the next free seat, not the thousandth.
func TestNewcomerWaitsForOneSeat(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 4})
	w.enqueue(fair.Flow{Name: "flood"}, 4000, 1)
	w.run(100)
	for round := range 20 {
		before := len(w.order)
		if n := w.enqueue(fair.Flow{Name: "victim"}, 1, 1); n != 1 {
			t.Fatalf("round %d: the victim's call was not queued", round)
		}
		if len(w.order) != before {
			t.Fatalf("round %d: the victim's call entered a full window", round)
		}
		// Each entry done frees one seat; the victim's call must take
		// the first or the second.
		freed := 0
		for w.order[len(w.order)-1] != "victim" {
			w.finishOldest(time.Millisecond)
			freed++
		}
		if freed > 2 {
			t.Errorf("round %d: the victim's call took the %d-th seat freed, want the first or the second", round, freed)
		}
	}
}

// TestNoStarvation: a flow of weight 1 is served while one of the
// greatest weight has thousands queued: once per [fair.MaxWeight] of the
// other's admissions, as the weights say.
func TestNoStarvation(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 1, FlowMaxQueued: 1 << 20})
	w.enqueue(fair.Flow{Name: "heavy", Weight: fair.MaxWeight}, 10*fair.MaxWeight, 1)
	w.enqueue(fair.Flow{Name: "light", Weight: 1}, 3, 1)
	for count(w.order)["light"] < 3 {
		w.finishOldest(time.Millisecond)
		if len(w.order) > 2*fair.MaxWeight+10 {
			t.Fatalf("light got %d of its 3 calls in after %d admissions, want all 3 within %d", count(w.order)["light"], len(w.order), 2*fair.MaxWeight+10)
		}
	}
	if got := count(w.order)["heavy"]; got < 2*fair.MaxWeight-2 {
		t.Errorf("heavy got %d admissions before light's third, want about %d (its weight, twice)", got, 2*fair.MaxWeight)
	}
}

func TestExempt(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 2})
	w.enqueue(fair.Flow{Name: "flood"}, 100, 1)
	if n := w.enqueue(fair.Flow{Name: "health", Exempt: true}, 3, 1); n != 3 {
		t.Fatalf("Enqueue of 3 exempt entries queued %d", n)
	}
	if got := count(w.order); got["health"] != 3 || got["flood"] != 2 {
		t.Fatalf("admitted %v, want the 2 seats' flood entries and all 3 exempt entries at once", got)
	}
	if st := w.s.Stats(w.now); st.Used != 5 {
		t.Errorf("Stats().Used = %d, want 5 (an exempt flow's entries take seats past the window)", st.Used)
	}
	// The others wait for the exempt entries to leave.
	for range 3 {
		w.finishOldest(time.Millisecond)
	}
	if got := count(w.order)["flood"]; got != 2 {
		t.Errorf("flood got %d admissions while the window was over its seats, want 2", got)
	}
	w.finishOldest(time.Millisecond)
	if got := count(w.order)["flood"]; got != 3 {
		t.Errorf("flood got %d admissions once a seat was free, want 3", got)
	}
}

func TestQueueBound(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 1, FlowMaxQueued: 10})
	w.enqueue(fair.Flow{Name: "busy"}, 1, 1) // takes the seat
	if n := w.enqueue(fair.Flow{Name: "busy"}, 15, 1); n != 10 {
		t.Errorf("Enqueue of 15 entries of cost 1 past a bound of 10 queued %d, want 10", n)
	}
	if n := w.enqueue(fair.Flow{Name: "busy"}, 1, 0.5); n != 0 {
		t.Errorf("Enqueue into a full queue queued %d, want 0", n)
	}
	if n := w.enqueue(fair.Flow{Name: "other"}, 10, 1); n != 10 {
		t.Errorf("another flow's Enqueue queued %d of 10, want 10: a full queue is its flow's alone", n)
	}
	if n := w.enqueue(fair.Flow{Name: "big"}, 1, 50); n != 1 {
		t.Errorf("Enqueue of one entry of cost 50 into an empty queue of bound 10 queued %d, want 1", n)
	}
	if d := w.s.RetryAfter("busy"); d < time.Millisecond {
		t.Errorf("RetryAfter(busy) = %v, want at least 1ms", d)
	}
	// As the queue drains, it takes entries again.
	for count(w.order)["busy"] < 2 {
		w.finishOldest(time.Millisecond)
	}
	if n := w.enqueue(fair.Flow{Name: "busy"}, 1, 1); n != 1 {
		t.Errorf("Enqueue after the queue lost an entry queued %d, want 1", n)
	}
}

// TestHoldWakesOnlyForAQueue: a hold that ends is a reason to wake only
// while an entry waits for the seat it frees. A caller alone, whose
// entries all fit, sets no timer; once an entry waits, the oldest seat's
// hold end is the wake, passed already if it ended meanwhile, and the
// tick then lets the waiting entry in.
func TestHoldWakesOnlyForAQueue(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 2, HoldMin: time.Millisecond, HoldMax: time.Millisecond})
	w.enqueue(fair.Flow{Name: "alone"}, 2, 1) // both seats
	if at, ok := w.s.NextWake(); ok {
		t.Fatalf("NextWake() = %v with nothing queued, want none: a caller alone would be woken for its holds", at.Sub(t0))
	}
	w.now = w.now.Add(5 * time.Millisecond) // both holds ended, nobody woke
	if st := w.s.Stats(w.now); st.Used != 0 || st.Waiting != 2 {
		t.Errorf("Stats(now) with both holds ended = %d used, %d waiting; want 0 and 2: the seats past their hold are reported so without a wake", st.Used, st.Waiting)
	}
	w.enqueue(fair.Flow{Name: "other"}, 1, 1)
	if got := count(w.order)["other"]; got != 0 {
		t.Fatalf("other got %d admissions with both seats held, want 0 before a tick", got)
	}
	at, ok := w.s.NextWake()
	if want := t0.Add(time.Millisecond); !ok || !at.Equal(want) {
		t.Fatalf("NextWake() = %v, %v with an entry queued, want the first hold's end %v", at.Sub(t0), ok, want.Sub(t0))
	}
	w.take(w.s.Tick(w.now))
	if got := count(w.order)["other"]; got != 1 {
		t.Errorf("other got %d admissions after the tick, want 1: the held seats were freed", got)
	}
}

func TestDeadlines(t *testing.T) {
	// A hold of an hour: the seat stays taken while the queue waits.
	w := newWindow(t, fair.Config{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	w.enqueue(fair.Flow{Name: "a"}, 1, 1) // takes the seat
	soon, later := w.now.Add(10*time.Millisecond), w.now.Add(time.Hour)
	es := []*fair.Entry[string]{
		{Value: "soon", Cost: 1, Deadline: soon},
		{Value: "later", Cost: 1, Deadline: later},
		{Value: "soon", Cost: 1, Deadline: soon},
	}
	_, m := w.s.Enqueue(w.now, fair.Flow{Name: "b"}, es)
	w.take(m)
	if at, ok := w.s.NextWake(); !ok || !at.Equal(soon) {
		t.Errorf("NextWake() = %v, %v; want the first deadline %v", at, ok, soon)
	}
	w.now = soon
	w.take(w.s.Tick(w.now))
	if got := count(w.expired); got["soon"] != 2 || len(w.expired) != 2 {
		t.Errorf("Tick at the deadline expired %v, want the two entries due", w.expired)
	}
	w.run(1)
	if got := count(w.order); got["soon"] != 0 || got["later"] != 1 {
		t.Errorf("admitted %v; an expired entry must never enter the window", w.order)
	}

	// A head whose deadline passed without a Tick expires when its
	// turn comes rather than being admitted.
	_, m = w.s.Enqueue(w.now, fair.Flow{Name: "c"}, []*fair.Entry[string]{{Value: "late", Cost: 1, Deadline: w.now.Add(time.Millisecond)}})
	w.take(m)
	w.finishOldest(time.Second)
	if got := count(w.order)["late"]; got != 0 || count(w.expired)["late"] != 1 {
		t.Errorf("a head past its deadline: admitted %d, expired %v; want expired", got, w.expired)
	}
}

func TestCancel(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 1})
	w.enqueue(fair.Flow{Name: "a"}, 1, 1)
	es := []*fair.Entry[string]{{Value: "x", Cost: 1}, {Value: "y", Cost: 1}, {Value: "z", Cost: 1}}
	w.s.Enqueue(w.now, fair.Flow{Name: "b"}, es)
	if ok, _ := w.s.Cancel(w.now, es[1]); !ok {
		t.Errorf("Cancel of a queued entry = false, want true")
	}
	if ok, _ := w.s.Cancel(w.now, es[1]); ok {
		t.Errorf("Cancel of a canceled entry = true, want false")
	}
	w.run(2)
	if got := w.order[1:]; len(got) != 2 || got[0] != "x" || got[1] != "z" {
		t.Errorf("admitted %v after a, want x then z", got)
	}
	if ok, _ := w.s.Cancel(w.now, es[0]); ok {
		t.Errorf("Cancel of an admitted entry = true, want false")
	}
	if st := w.s.Stats(w.now); len(st.Flows) != 1 || st.Flows[0].Name != "b" || st.Flows[0].Inside != 1 || st.Flows[0].Queued != 0 {
		t.Errorf("Stats().Flows = %+v, want b's alone, with z inside", st.Flows)
	}
}

func TestHold(t *testing.T) {
	cfg := fair.Config{Seats: 2, HoldMin: 5 * time.Millisecond, HoldMax: 80 * time.Millisecond}
	w := newWindow(t, cfg)
	if h := w.s.Hold(); h != cfg.HoldMin {
		t.Fatalf("Hold() of a new scheduler = %v, want HoldMin %v", h, cfg.HoldMin)
	}
	// Two calls that sleep leave their seats at the hold, and two more
	// come in; they wait on, done whenever.
	w.enqueue(fair.Flow{Name: "sleepy"}, 4, 1)
	w.now = w.now.Add(cfg.HoldMin)
	w.take(w.s.Tick(w.now))
	if len(w.order) != 4 {
		t.Fatalf("after the hold %d entries were admitted, want 4", len(w.order))
	}
	if st := w.s.Stats(w.now); st.Used != 2 || st.Waiting != 2 {
		t.Errorf("Stats() = %d used, %d waiting; want 2 and 2", st.Used, st.Waiting)
	}
	for range 4 {
		w.finishOldest(0)
	}
	if st := w.s.Stats(w.now); st.Used != 0 || st.Waiting != 0 || len(st.Flows) != 0 {
		t.Errorf("Stats() once all are done = %+v, want nothing inside", st)
	}

	// Calls answered in their seats after 10ms each teach the hold: it
	// grows toward 4×10ms, and never past HoldMax.
	w = newWindow(t, fair.Config{Seats: 1, HoldMin: cfg.HoldMin, HoldMax: cfg.HoldMax})
	w.enqueue(fair.Flow{Name: "work"}, 1000, 1)
	for range 100 {
		w.finishOldest(10 * time.Millisecond)
	}
	if h := w.s.Hold(); h < 35*time.Millisecond || h > 40*time.Millisecond {
		t.Errorf("Hold() after calls of 10ms = %v, want about 40ms", h)
	}
	// Calls of 30ms take it to HoldMax.
	for range 100 {
		w.finishOldest(30 * time.Millisecond)
	}
	if h := w.s.Hold(); h != cfg.HoldMax {
		t.Errorf("Hold() after calls of 30ms = %v, want HoldMax %v", h, cfg.HoldMax)
	}

	// Calls that take longer than HoldMax waited on something: they teach
	// nothing, and a window of calls that sleep takes a new one every
	// hold.
	w = newWindow(t, fair.Config{Seats: 1, HoldMin: cfg.HoldMin, HoldMax: cfg.HoldMax})
	w.enqueue(fair.Flow{Name: "sleepy"}, 100, 1)
	for range 50 {
		w.now = w.now.Add(w.s.Hold())
		w.take(w.s.Tick(w.now))
	}
	if len(w.order) != 51 {
		t.Errorf("50 holds admitted %d entries, want 51", len(w.order))
	}
	w.now = w.now.Add(time.Second)
	for len(w.inside) > 0 {
		w.finishOldest(0)
	}
	if h := w.s.Hold(); h != cfg.HoldMin {
		t.Errorf("Hold() after calls of a second = %v, want HoldMin %v", h, cfg.HoldMin)
	}

	// A burst that left its seats before the hold had learned teaches it
	// when its calls are answered, within HoldMax.
	w = newWindow(t, fair.Config{Seats: 4, HoldMin: cfg.HoldMin, HoldMax: cfg.HoldMax})
	w.enqueue(fair.Flow{Name: "burst"}, 40, 1)
	for range 10 {
		w.now = w.now.Add(w.s.Hold())
		w.take(w.s.Tick(w.now))
	}
	w.now = w.now.Add(20 * time.Millisecond)
	for len(w.inside) > 0 {
		w.finishOldest(0)
	}
	if h := w.s.Hold(); h < 2*cfg.HoldMin {
		t.Errorf("Hold() after a burst answered 20ms or more after it entered = %v, want it to have grown from HoldMin %v", h, cfg.HoldMin)
	}

	// A body being parsed does not teach the hold.
	w2 := newWindow(t, cfg)
	_, m := w2.s.Enqueue(w2.now, fair.Flow{Name: "a"}, []*fair.Entry[string]{{Value: "body", Untimed: true}})
	w2.now = w2.now.Add(4 * time.Millisecond)
	w2.s.Done(w2.now, m.Admitted[0])
	if h := w2.s.Hold(); h != cfg.HoldMin {
		t.Errorf("Hold() after an untimed entry = %v, want HoldMin %v", h, cfg.HoldMin)
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     fair.Config
		wantErr bool
		want    fair.Config
	}{
		{name: "zero takes the defaults", cfg: fair.Config{},
			want: fair.Config{Seats: fair.DefaultSeats, HoldMin: fair.DefaultHoldMin, HoldMax: fair.DefaultHoldMax, FlowMaxQueued: fair.DefaultFlowMaxQueued, Round: fair.DefaultRound}},
		{name: "a fixed hold", cfg: fair.Config{HoldMin: time.Second, HoldMax: time.Second},
			want: fair.Config{Seats: fair.DefaultSeats, HoldMin: time.Second, HoldMax: time.Second, FlowMaxQueued: fair.DefaultFlowMaxQueued, Round: fair.DefaultRound}},
		{name: "a short HoldMax lowers the default HoldMin", cfg: fair.Config{HoldMax: time.Millisecond},
			want: fair.Config{Seats: fair.DefaultSeats, HoldMin: time.Millisecond, HoldMax: time.Millisecond, FlowMaxQueued: fair.DefaultFlowMaxQueued, Round: fair.DefaultRound}},
		{name: "a long HoldMin raises the default HoldMax", cfg: fair.Config{HoldMin: time.Second},
			want: fair.Config{Seats: fair.DefaultSeats, HoldMin: time.Second, HoldMax: time.Second, FlowMaxQueued: fair.DefaultFlowMaxQueued, Round: fair.DefaultRound}},
		{name: "negative seats", cfg: fair.Config{Seats: -1}, wantErr: true},
		{name: "negative hold", cfg: fair.Config{HoldMin: -time.Second}, wantErr: true},
		{name: "negative queue", cfg: fair.Config{FlowMaxQueued: -1}, wantErr: true},
		{name: "HoldMax below HoldMin", cfg: fair.Config{HoldMin: 2 * time.Second, HoldMax: time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := fair.New[int](tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := s.Config(); got != tt.want {
				t.Errorf("New(%+v).Config() = %+v, want %+v", tt.cfg, got, tt.want)
			}
		})
	}
}

func TestCheckWeight(t *testing.T) {
	for _, w := range []float64{0, 0.5, 1, fair.MaxWeight} {
		if err := fair.CheckWeight(w); err != nil {
			t.Errorf("CheckWeight(%v) = %v, want nil", w, err)
		}
	}
	for _, w := range []float64{-1, fair.MaxWeight + 1} {
		if err := fair.CheckWeight(w); err == nil {
			t.Errorf("CheckWeight(%v) = nil, want an error", w)
		}
	}
	if !errors.Is(fair.ErrQueueFull, fair.ErrQueueFull) {
		t.Fatal("ErrQueueFull is not itself")
	}
}

// TestConcurrent has many goroutines queue, finish, cancel and tick at
// random; afterwards every entry came out once, and the scheduler is
// empty.
func TestConcurrent(t *testing.T) {
	s, err := fair.New[int](fair.Config{Seats: 8, FlowMaxQueued: 50})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var clock time.Time = t0
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Microsecond)
		return clock
	}
	// Every entry admitted is done by whichever goroutine gets it.
	admitted := make(chan *fair.Entry[int], 1<<16)
	outcomes := make([]int, 20*200)
	var omu sync.Mutex
	// A round that ends waits for a poll, which one of the goroutines
	// makes at random later.
	var pollWanted atomic.Bool
	settle := func(m fair.Moves[int]) {
		if m.AwaitPoll {
			pollWanted.Store(true)
		}
		for _, e := range m.Admitted {
			admitted <- e
		}
		omu.Lock()
		for _, e := range m.Expired {
			outcomes[e.Value]++
		}
		omu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 200; {
				n := min(1+r.IntN(5), 200-i)
				es := make([]*fair.Entry[int], n)
				for k := range es {
					es[k] = &fair.Entry[int]{Value: g*200 + i + k, Cost: 1}
					if r.IntN(4) == 0 {
						es[k].Deadline = t0.Add(time.Duration(r.IntN(2000)) * time.Microsecond)
					}
				}
				q, m := s.Enqueue(now(), fair.Flow{Name: string(rune('a' + g%5)), Weight: float64(1 + g%3)}, es)
				settle(m)
				omu.Lock()
				for _, e := range es[q:] {
					outcomes[e.Value]++ // refused
				}
				omu.Unlock()
				for _, e := range es[:q] {
					if r.IntN(8) == 0 {
						ok, m := s.Cancel(now(), e)
						settle(m)
						if ok {
							omu.Lock()
							outcomes[e.Value]++
							omu.Unlock()
						}
					}
				}
				i += n
				select {
				case e := <-admitted:
					settle(s.Done(now(), e))
					omu.Lock()
					outcomes[e.Value]++
					omu.Unlock()
				default:
				}
				if r.IntN(10) == 0 {
					settle(s.Tick(now()))
				}
				if r.IntN(3) == 0 && pollWanted.Swap(false) {
					settle(s.Polled(now()))
				}
			}
		})
	}
	wg.Wait()
	// Drain: finish what is inside until nothing is left.
	for {
		settle(s.Tick(now().Add(time.Hour)))
		if pollWanted.Swap(false) {
			settle(s.Polled(now()))
		}
		select {
		case e := <-admitted:
			settle(s.Done(now(), e))
			outcomes[e.Value]++
			continue
		default:
		}
		break
	}
	for v, n := range outcomes {
		if n != 1 {
			t.Errorf("entry %d came out %d times, want once", v, n)
		}
	}
	if st := s.Stats(time.Now()); st.Used != 0 || st.Waiting != 0 || len(st.Flows) != 0 {
		t.Errorf("Stats() after all is done = %+v, want empty", st)
	}
}

// TestRounds checks that while two flows compete the window takes at most
// a round's entries between two network polls, the entry of the flow
// that waits least first, that a queued entry's deadline holds while the
// round waits, and that a flow alone, or Round below 0, is never held
// for a poll.
func TestRounds(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 16, Round: 4})
	w.manual = true
	flood := fair.Flow{Name: "flood"}
	w.enqueue(flood, 100, 1)
	if len(w.order) != 16 || w.awaiting {
		t.Fatalf("a flow alone took %d seats of 16 (awaiting a poll: %v), want all of them at once", len(w.order), w.awaiting)
	}
	w.enqueue(fair.Flow{Name: "victim"}, 1, 1)
	for range 10 {
		w.finishOldest(time.Microsecond)
	}
	got := w.order[16:]
	if len(got) != 4 || got[0] != "victim" || !w.awaiting {
		t.Fatalf("after 10 seats freed while two flows compete, admitted %v (awaiting a poll: %v); want 4, the victim's first, then a poll awaited", got, w.awaiting)
	}
	if r := w.s.Stats(w.now).Rounds; r != 1 {
		t.Errorf("Stats().Rounds after one round = %d, want 1", r)
	}
	if !w.s.Competing(w.now) {
		t.Error("Competing() = false while two flows compete")
	}
	for range 2 {
		w.finishOldest(time.Microsecond)
	}
	if n := len(w.order); n != 20 {
		t.Fatalf("seats freed while a poll is awaited let in %d more, want none", n-20)
	}
	w.polled()
	if n := len(w.order); n != 24 || !w.awaiting {
		t.Fatalf("a poll let in %d, want a round of 4, then a poll awaited again", n-20)
	}
	// A queued entry's deadline comes while the round waits.
	dl := &fair.Entry[string]{Value: "late", Cost: 1, Deadline: w.now.Add(time.Millisecond)}
	_, m := w.s.Enqueue(w.now, fair.Flow{Name: "late"}, []*fair.Entry[string]{dl})
	w.take(m)
	w.now = w.now.Add(time.Millisecond)
	w.take(w.s.Tick(w.now))
	if len(w.expired) != 1 || w.expired[0] != "late" {
		t.Fatalf("expired while a poll is awaited = %v, want the late entry", w.expired)
	}
	// The victim was last admitted a second ago: the flood alone fills
	// every free seat after the next poll.
	w.now = w.now.Add(time.Second)
	w.polled()
	if w.awaiting || w.s.Stats(w.now).Used != 16 {
		t.Fatalf("after the other flows left, the flood took %d seats of 16 (awaiting a poll: %v), want all of them", w.s.Stats(w.now).Used, w.awaiting)
	}

	off := newWindow(t, fair.Config{Seats: 16, Round: -1})
	off.manual = true
	off.enqueue(fair.Flow{Name: "a"}, 100, 1)
	off.enqueue(fair.Flow{Name: "b"}, 100, 1)
	off.run(150)
	if off.awaiting {
		t.Errorf("with Round -1, two flows awaited a poll")
	}
	shares := count(off.order[32:132])
	if shares["a"] < 45 || shares["b"] < 45 {
		t.Errorf("with Round -1, 100 admissions of two flows = %v, want about half each", shares)
	}
}

// TestRoundsShare checks that rounds keep the shares: two flows, one
// sending batches of 50, the other one entry at a time, each polled
// round admitting about as many of each while both have entries queued.
func TestRoundsShare(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 8, Round: 8})
	w.manual = true
	w.enqueue(fair.Flow{Name: "batch"}, 50, 1)
	w.enqueue(fair.Flow{Name: "single"}, 50, 1)
	for range 40 {
		for len(w.inside) > 0 {
			w.finishOldest(time.Microsecond)
		}
		if !w.awaiting {
			t.Fatalf("the window emptied without a poll awaited after %d admissions", len(w.order))
		}
		w.polled()
		if len(w.order) >= 80 {
			break
		}
	}
	got := count(w.order[8:80])
	if got["batch"] != 36 || got["single"] != 36 {
		t.Errorf("72 admissions in rounds of two competing flows = %v, want 36 each", got)
	}
}

// TestRoundsAlone checks that a flow alone is not held for a poll by a
// round that other flows, long gone, left behind.
func TestRoundsAlone(t *testing.T) {
	w := newWindow(t, fair.Config{Seats: 16, Round: 4})
	w.manual = true
	// a and b compete for a whole round, which ends with nothing left
	// queued.
	w.enqueue(fair.Flow{Name: "a"}, 1, 1)
	w.enqueue(fair.Flow{Name: "b"}, 4, 1)
	for len(w.inside) > 0 {
		w.finishOldest(time.Microsecond)
	}
	// An hour later, c alone.
	w.now = w.now.Add(time.Hour)
	from := len(w.order)
	w.enqueue(fair.Flow{Name: "c"}, 100, 1)
	if n := len(w.order) - from; n != 16 || w.awaiting {
		t.Fatalf("a flow alone an hour after others took %d seats of 16 (awaiting a poll: %v), want all of them at once", n, w.awaiting)
	}
	if w.s.Competing(w.now) {
		t.Error("Competing() = true for a flow alone")
	}
}

// TestRoundsPaced checks that while a round waits for a poll, the pace
// sets no wake: its tokens do not fill meanwhile, so a wake for them
// would come at once, again and again.
func TestRoundsPaced(t *testing.T) {
	w, cpu := measured(t, fair.Config{Seats: 50, CPUTarget: 0.5, Round: 2, HoldMin: time.Hour, HoldMax: time.Hour})
	w.enqueue(fair.Flow{Name: "flood"}, 10000, 1)
	w.enqueue(fair.Flow{Name: "victim"}, 10000, 1)
	for range 60 {
		cpu.step(time.Millisecond, 1)
		w.now = w.now.Add(time.Millisecond)
		w.finishInside()
		w.take(w.s.Tick(w.now))
	}
	w.manual = true
	checked := 0
	for range 200 {
		cpu.step(100*time.Microsecond, 1)
		w.now = w.now.Add(100 * time.Microsecond)
		w.finishInside()
		w.take(w.s.Tick(w.now))
		if !w.awaiting {
			continue
		}
		checked++
		if at, ok := w.s.NextWake(); ok && !at.After(w.now) {
			t.Fatalf("while a round waits for a poll, NextWake = %v, at or before now %v: a timer would fire again at once", at.Sub(t0), w.now.Sub(t0))
		}
		w.polled()
	}
	if checked == 0 {
		t.Fatal("no round waited for a poll")
	}
}
