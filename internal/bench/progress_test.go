package bench

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a time that a test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// screen is what a Progress draws on: it keeps what was written and tells
// of each write, so that a test can wait for a draw without a clock.
type screen struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newScreen() *screen { return &screen{wrote: make(chan struct{}, 16)} }

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote <- struct{}{}
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// runProgress starts p's drawing goroutine and returns a function that
// makes it draw once at the current time of p, and waits for the line.
func runProgress(t *testing.T, p *Progress, s *screen) (draw func(), tick chan<- time.Time) {
	t.Helper()
	ticks := make(chan time.Time)
	go p.run(ticks)
	return func() {
		ticks <- time.Time{}
		<-s.wrote
	}, ticks
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		name  string
		share float64
		done  int64
		rate  float64
		unit  string
		want  string
	}{
		{"half way", 0.523, 61234, 30512.4, "req", "echo         [██████████▌         ]  52%  61234 req  30512 req/s"},
		{"not started", 0, 0, 0, "req", "echo         [                    ]   0%  0 req  0.0 req/s"},
		{"done", 1, 5, 4.44, "batches", "echo         [████████████████████] 100%  5 batches  4.4 batches/s"},
		{"nearly", 0.99, 7, 100, "req", "echo         [███████████████████▊]  99%  7 req  100 req/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := progressLine("echo", tt.share, tt.done, tt.rate, tt.unit); got != tt.want {
				t.Errorf("progressLine(%v, %d, %v) =\n%q, want\n%q", tt.share, tt.done, tt.rate, got, tt.want)
			}
		})
	}
}

func TestProgressShare(t *testing.T) {
	c := newClock()
	start := c.now()
	tests := []struct {
		name string
		plan progressPlan
		at   time.Duration
		done int64
		want int // percent
	}{
		{"no plan yet", progressPlan{}, time.Second, 100, 0},
		{"by time", progressPlan{total: int64(4 * time.Second), from: start}, time.Second, 100, 25},
		{"by time, past the plan", progressPlan{total: int64(4 * time.Second), from: start}, time.Minute, 100, 99},
		{"by count", progressPlan{byCount: true, total: 5, from: start}, time.Hour, 2, 40},
		{"by count, all done", progressPlan{byCount: true, total: 5, from: start}, 0, 5, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percent(tt.plan.share(start.Add(tt.at), tt.done)); got != tt.want {
				t.Errorf("share at %v with %d done = %d%%, want %d%%", tt.at, tt.done, got, tt.want)
			}
		})
	}
}

func TestProgressDrawsAndClears(t *testing.T) {
	s := newScreen()
	c := newClock()
	p := newProgress(s, "fan-out", c.now)
	draw, tick := runProgress(t, p, s)

	p.planCount(4, "batches")
	p.add(1)
	c.advance(time.Second)
	draw()
	p.add(1)
	c.advance(time.Second)
	draw()
	p.Stop()

	out := s.String()
	draws := strings.Split(out, "\r")[1:] // each draw starts with \r
	if len(draws) != 4 {
		t.Fatalf("output %q: want 2 lines drawn, then the clear (4 parts after \\r), got %d", out, len(draws))
	}
	for i, want := range []string{"fan-out      [█████               ]  25%  1 batches  1.0 batches/s",
		"fan-out      [██████████          ]  50%  2 batches  1.0 batches/s"} {
		if got := strings.TrimRight(draws[i], " "); got != want {
			t.Errorf("draw %d = %q, want %q", i+1, got, want)
		}
	}
	width := len([]rune(draws[1]))
	if want := "\r" + strings.Repeat(" ", width) + "\r"; !strings.HasSuffix(out, want) {
		t.Errorf("output %q: want it to end by blanking the %d-cell line and returning to its start", out, width)
	}

	// The goroutine has ended: nothing takes a tick, and another Stop
	// writes nothing.
	select {
	case tick <- c.now():
		t.Error("the drawing goroutine took a tick after Stop")
	default:
	}
	p.Stop()
	if s.String() != out {
		t.Errorf("a second Stop wrote %q", strings.TrimPrefix(s.String(), out))
	}
}

func TestProgressShorterLineCoversLonger(t *testing.T) {
	s := newScreen()
	c := newClock()
	p := newProgress(s, "echo", c.now)
	draw, _ := runProgress(t, p, s)
	p.add(123456789)
	c.advance(time.Second)
	draw()
	c.advance(time.Hour) // the count stays; the rate falls to a shorter number
	draw()
	p.Stop()
	lines := strings.Split(s.String(), "\r")
	first, second := []rune(lines[1]), []rune(lines[2])
	if len(second) < len(first) {
		t.Errorf("second line %q is %d cells, want it padded to the %d of the first %q", string(second), len(second), len(first), string(first))
	}
	if strings.TrimRight(string(second), " ") == strings.TrimRight(string(first), " ") {
		t.Errorf("second line %q, want a lower rate than the first %q", string(second), string(first))
	}
}

func TestProgressStopBeforeAnyTick(t *testing.T) {
	s := newScreen()
	p := newProgress(s, "echo", newClock().now)
	runProgress(t, p, s)
	p.add(5)
	p.Stop()
	if out := s.String(); out != "" {
		t.Errorf("Stop before any tick wrote %q, want nothing", out)
	}
}

func TestStartProgressStops(t *testing.T) {
	// With the real ticker the test cannot know whether a line was drawn,
	// only that Stop leaves nothing running (goleak checks at the end) and
	// nothing shown.
	var buf bytes.Buffer
	p := StartProgress(&buf, "echo")
	p.planTime(time.Second, "req")
	p.add(3)
	p.Stop()
	if out := buf.String(); out != "" && !strings.HasSuffix(out, " \r") {
		t.Errorf("output %q: want nothing, or a line cleared at the end", out)
	}
}

func TestNilProgressDoesNothing(t *testing.T) {
	var p *Progress
	p.planTime(time.Second, "req")
	p.planCount(3, "batches")
	p.add(1)
	p.Stop()
}

// TestScenariosCountProgress checks that a scenario plans its progress and
// counts every operation on it, drawing nothing until a tick comes.
func TestScenariosCountProgress(t *testing.T) {
	t.Run("batches", func(t *testing.T) {
		s := newScreen()
		p := newProgress(s, "fan-out", time.Now)
		runProgress(t, p, s)
		defer p.Stop()
		_, err := FanOut(t.Context(), FanOutConfig{URL: serve(t, fakeToolbus{}), Calls: 3, Sleep: time.Millisecond, Repeats: 4, Progress: p})
		if err != nil {
			t.Fatalf("FanOut() error = %v", err)
		}
		if got := p.done.Load(); got != 4 {
			t.Errorf("progress counted %d batches, want 4", got)
		}
		p.mu.Lock()
		plan := p.plan
		p.mu.Unlock()
		if !plan.byCount || plan.total != 4 || plan.unit != "batches" {
			t.Errorf("progress plan = %+v, want 4 batches", plan)
		}
	})
	t.Run("loop", func(t *testing.T) {
		s := newScreen()
		p := newProgress(s, "loop", time.Now)
		runProgress(t, p, s)
		defer p.Stop()
		var mu sync.Mutex
		ops := 0
		res, err := Loop(t.Context(), LoopConfig{Concurrency: 2, Duration: 30 * time.Millisecond, Warmup: 10 * time.Millisecond, progress: p},
			func(context.Context, int) error {
				time.Sleep(time.Millisecond)
				mu.Lock()
				ops++
				mu.Unlock()
				return nil
			})
		if err != nil {
			t.Fatalf("Loop() error = %v", err)
		}
		if got := p.done.Load(); got != int64(ops) || got < res.Requests {
			t.Errorf("progress counted %d operations, want the %d run (%d measured)", got, ops, res.Requests)
		}
	})
}
