package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// progressInterval is how often a [Progress] redraws its line.
const progressInterval = 200 * time.Millisecond

// progressBarWidth is the width of the bar, in cells. With the name, the
// share, the count and the rate the line stays within 80 columns.
const progressBarWidth = 20

// rateWindow is how many redraws back the current rate is measured over: a
// second at [progressInterval].
const rateWindow = 5

// Progress draws how far a running scenario has got as one line that
// redraws itself in place with a carriage return: the scenario's name, a
// bar, the share done, the operations finished (warmup included) and their
// rate over the last second. A scenario bounded by time (a closed loop)
// measures the share by the time passed against the time it planned; one
// bounded by a count (batches sent one after another) by the batches
// answered. The share stays below 100% while a time-bounded scenario runs
// over its plan (a grace period, waiting for jobs to finish).
//
// A scenario whose config holds a Progress plans it and counts its
// operations; the caller starts it with [StartProgress] before the scenario
// and calls [Progress.Stop] after, before printing anything else to the same
// terminal. The methods of a nil *Progress do nothing, so a config without
// one shows nothing. A Progress is safe for concurrent use.
type Progress struct {
	w    io.Writer
	name string
	now  func() time.Time

	done atomic.Int64

	mu      sync.Mutex
	plan    progressPlan
	stopped bool

	stop     chan struct{}
	finished chan struct{}

	// Used by the drawing goroutine only, and by Stop once it has ended.
	start   time.Time
	width   int // runes of the line last drawn; 0 when none is shown
	samples []progressSample
}

// progressPlan is what bounds a scenario: a time or a count of operations.
type progressPlan struct {
	byCount bool
	total   int64 // operations, or nanoseconds
	from    time.Time
	unit    string
}

type progressSample struct {
	at   time.Time
	done int64
}

// StartProgress starts drawing the progress of the scenario called name on
// w, a terminal, until [Progress.Stop]. The first line appears after a
// fifth of a second, so a scenario shorter than that shows none.
func StartProgress(w io.Writer, name string) *Progress {
	p := newProgress(w, name, time.Now)
	t := time.NewTicker(progressInterval)
	go func() {
		defer t.Stop()
		p.run(t.C)
	}()
	return p
}

// newProgress returns a Progress that draws on w whenever its run receives
// a tick, reading the time from now.
func newProgress(w io.Writer, name string, now func() time.Time) *Progress {
	return &Progress{
		w:        w,
		name:     name,
		now:      now,
		start:    now(),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
		plan:     progressPlan{unit: "req"},
	}
}

// Stop ends the drawing goroutine, waits for it, and clears the line it
// drew, leaving the cursor at the start of the cleared line. Calling it
// again does nothing.
func (p *Progress) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	already := p.stopped
	p.stopped = true
	p.mu.Unlock()
	if already {
		return
	}
	close(p.stop)
	<-p.finished
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
}

// planTime says that the scenario runs for about d, from now on, counting
// operations in unit ("req").
func (p *Progress) planTime(d time.Duration, unit string) {
	p.setPlan(progressPlan{total: int64(d), unit: unit})
}

// planCount says that the scenario is done after n operations, counted in
// unit ("batches").
func (p *Progress) planCount(n int, unit string) {
	p.setPlan(progressPlan{byCount: true, total: int64(n), unit: unit})
}

func (p *Progress) setPlan(plan progressPlan) {
	if p == nil {
		return
	}
	plan.from = p.now()
	p.mu.Lock()
	p.plan = plan
	p.mu.Unlock()
}

// add counts n more operations finished.
func (p *Progress) add(n int64) {
	if p == nil {
		return
	}
	p.done.Add(n)
}

func (p *Progress) run(tick <-chan time.Time) {
	defer close(p.finished)
	for {
		select {
		case <-p.stop:
			return
		case <-tick:
			p.draw(p.now())
		}
	}
}

// draw writes the line as it stands at now over the one drawn before.
func (p *Progress) draw(now time.Time) {
	done := p.done.Load()
	p.samples = append(p.samples, progressSample{at: now, done: done})
	if len(p.samples) > rateWindow+1 {
		p.samples = p.samples[1:]
	}
	from := progressSample{at: p.start}
	if len(p.samples) > 1 {
		from = p.samples[0]
	}
	var rate float64
	if d := now.Sub(from.at); d > 0 {
		rate = float64(done-from.done) / d.Seconds()
	}
	p.mu.Lock()
	plan := p.plan
	p.mu.Unlock()
	line := progressLine(p.name, plan.share(now, done), done, rate, plan.unit)
	n := utf8.RuneCountInString(line)
	pad := max(p.width-n, 0)
	fmt.Fprint(p.w, "\r"+line+strings.Repeat(" ", pad))
	p.width = n
}

// share returns how much of the plan is done at now, from 0 to 1; 0 when
// there is no plan yet.
func (pl progressPlan) share(now time.Time, done int64) float64 {
	if pl.total <= 0 {
		return 0
	}
	if pl.byCount {
		return min(float64(done)/float64(pl.total), 1)
	}
	// The plan leaves out what follows the measured time (grace, drain), so
	// a running scenario past it is nearly done, not done.
	return min(float64(now.Sub(pl.from))/float64(pl.total), 0.99)
}

// progressLine formats one state of a scenario:
// "echo         [██████████▌         ]  52%  61234 req  30512 req/s".
func progressLine(name string, share float64, done int64, rate float64, unit string) string {
	share = min(max(share, 0), 1)
	r := "%.0f"
	if rate < 10 {
		r = "%.1f"
	}
	return fmt.Sprintf("%-12s [%s] %3d%%  %d %s  "+r+" %s/s",
		name, bar(share, progressBarWidth), percent(share), done, unit, rate, unit)
}

// percent returns share (0 to 1) in whole percent, rounded down: 99.9%
// done is not done. The epsilon keeps 0.99 from reading 98 through float
// error.
func percent(share float64) int {
	return int(math.Floor(share*100 + 1e-9))
}

// eighths are the block characters from one eighth of a cell to a full one.
var eighths = []rune("▏▎▍▌▋▊▉█")

// bar draws share (0 to 1) of width cells in block characters, to the
// nearest eighth of a cell, padded with spaces to width. A share above zero
// shows at least an eighth, so that a small count is told from none.
func bar(share float64, width int) string {
	share = min(max(share, 0), 1)
	n := int(share*float64(width*8) + 0.5)
	if n == 0 && share > 0 {
		n = 1
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(string(eighths[7]), n/8))
	cells := n / 8
	if n%8 > 0 {
		b.WriteRune(eighths[n%8-1])
		cells++
	}
	b.WriteString(strings.Repeat(" ", width-cells))
	return b.String()
}
