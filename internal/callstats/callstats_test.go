package callstats

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)} }

func find(t *testing.T, st []Stats, name string) Stats {
	t.Helper()
	for _, s := range st {
		if s.Method == name {
			return s
		}
	}
	t.Fatalf("no stats for %q in %+v", name, st)
	return Stats{}
}

func TestPercentilesAndRates(t *testing.T) {
	c := newClock()
	s := New(WithClock(c.now))
	c.add(time.Minute) // the set has existed for the whole window
	for i := 1; i <= 100; i++ {
		s.Begin("echo")
		s.End("echo", time.Duration(i)*time.Millisecond, failIf(i%10 == 0))
	}
	st := find(t, s.Snapshot(), "echo")
	if st.Calls != 100 || st.Errors != 10 || st.Total != 100 || st.TotalErrors != 10 || st.InFlight != 0 {
		t.Fatalf("counts: %+v", st)
	}
	// The bucket bound is within a quarter-octave above the true value.
	for _, p := range []struct {
		got, want time.Duration
	}{{st.P50, 50 * time.Millisecond}, {st.P99, 99 * time.Millisecond}} {
		if p.got < p.want || float64(p.got) > float64(p.want)*1.19 {
			t.Errorf("percentile %v, want within [%v, %v]", p.got, p.want, time.Duration(float64(p.want)*1.19))
		}
	}
	if st.Rate < 100.0/60.0*0.99 || st.Rate > 100.0/55.0 {
		t.Errorf("rate %.3f/s, want about 100 calls per minute", st.Rate)
	}
}

func TestWindowForgetsOldCalls(t *testing.T) {
	c := newClock()
	s := New(WithClock(c.now))
	s.Begin("a")
	s.End("a", time.Millisecond, -32001)
	c.add(30 * time.Second)
	if st := find(t, s.Snapshot(), "a"); st.Calls != 1 || st.Errors != 1 {
		t.Fatalf("after 30s: %+v", st)
	}
	c.add(Window)
	st := find(t, s.Snapshot(), "a")
	if st.Calls != 0 || st.Rate != 0 || st.P50 != 0 {
		t.Fatalf("a call older than the window still counts: %+v", st)
	}
	if st.Total != 1 || st.TotalErrors != 1 {
		t.Fatalf("totals must stay: %+v", st)
	}
	// A reused slot starts empty.
	s.End("a", 2*time.Millisecond, 0)
	if st := find(t, s.Snapshot(), "a"); st.Calls != 1 || st.Errors != 0 {
		t.Fatalf("reused slot: %+v", st)
	}
}

func TestInFlight(t *testing.T) {
	s := New()
	s.Begin("slow")
	s.Begin("slow")
	if st := find(t, s.Snapshot(), "slow"); st.InFlight != 2 {
		t.Fatalf("in flight %d, want 2", st.InFlight)
	}
	s.End("slow", time.Second, 0)
	if st := find(t, s.Snapshot(), "slow"); st.InFlight != 1 || st.Calls != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestMethodCap(t *testing.T) {
	s := New(WithMaxMethods(3))
	for i := range 10 {
		name := fmt.Sprintf("m%d", i)
		s.Begin(name)
		s.End(name, time.Millisecond, 0)
	}
	st := s.Snapshot()
	if len(st) != 4 {
		t.Fatalf("got %d methods, want 3 and %s: %+v", len(st), Other, st)
	}
	if o := find(t, st, Other); o.Total != 7 {
		t.Fatalf("%s counts %d calls, want 7", Other, o.Total)
	}
}

func TestRecentErrorsNewestFirst(t *testing.T) {
	s := New(WithRecentErrors(3))
	for i := range 5 {
		s.RecordError(ErrorAnswer{ID: fmt.Sprint(i), Code: -32000})
	}
	got := s.RecentErrors()
	if len(got) != 3 || got[0].ID != "4" || got[1].ID != "3" || got[2].ID != "2" {
		t.Fatalf("got %+v, want ids 4,3,2", got)
	}
	if got[0].Time.IsZero() {
		t.Fatal("an error without a time gets the clock's")
	}
}

func TestBuckets(t *testing.T) {
	if bucketOf(0) != 0 || bucketOf(time.Hour) != buckets-1 {
		t.Fatal("out-of-range latencies must land in the end buckets")
	}
	for _, d := range []time.Duration{15 * time.Microsecond, time.Millisecond, 3 * time.Second} {
		i := bucketOf(d)
		if upper(i) < d || (i > 0 && upper(i-1) > d) {
			t.Errorf("%v in bucket %d with bounds (%v, %v]", d, i, upper(i-1), upper(i))
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	s := New()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("m%d", (g+i)%5)
				s.Begin(name)
				s.End(name, time.Duration(i)*time.Microsecond, failIf(i%7 == 0))
				if i%50 == 0 {
					s.RecordError(ErrorAnswer{Method: name})
					_ = s.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, st := range s.Snapshot() {
		total += st.Total
		if st.InFlight != 0 {
			t.Errorf("%s: in flight %d after every call ended", st.Method, st.InFlight)
		}
	}
	if total != 1600 {
		t.Fatalf("total %d, want 1600", total)
	}
}

func TestCodesBounded(t *testing.T) {
	var c Codes
	if c.Label(-32001) != "-32001" || c.Label(-32768) != "-32768" || c.Label(2001) != "2001" {
		t.Fatal("codes within the cap keep their number")
	}
	for i := range 2 * DefaultMaxCodes {
		c.Label(10000 + i)
	}
	if got := c.Label(99999); got != OtherCode {
		t.Fatalf("a code past the cap is %q, want %q", got, OtherCode)
	}
	if c.Label(2001) != "2001" || c.Label(-32099) != "-32099" {
		t.Fatal("codes seen before the cap, and reserved ones, keep their label")
	}
}

func TestNamesBounded(t *testing.T) {
	n := Names{Max: 2, Other: "_other"}
	if n.Label("a") != "a" || n.Label("b") != "b" || n.Label("c") != "_other" || n.Label("a") != "a" {
		t.Fatal("the first two names keep their labels, the third shares _other")
	}
}

// failIf is the code of an infrastructure error when failed, else 0.
func failIf(failed bool) int {
	if failed {
		return -32001
	}
	return 0
}
