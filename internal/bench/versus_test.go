package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// pairLoad is a fake [CompareConfig.Load] for [Pairs]: the round of a
// URL answers what results gives it, and does so only once every URL of
// its round (both builds' targets) has started, so that a Pairs that ran
// the two one after the other would never finish.
type pairLoad struct {
	results map[string]Result
	fail    map[string]error

	mu      sync.Mutex
	started map[int]int // the round's number → loads started in it
	rounds  map[string]int
	gates   map[int]chan struct{}
}

func newPairLoad(results map[string]Result) *pairLoad {
	return &pairLoad{results: results, started: map[int]int{}, rounds: map[string]int{}, gates: map[int]chan struct{}{}}
}

func (l *pairLoad) load(ctx context.Context, cfg LoadConfig) (Result, error) {
	l.mu.Lock()
	round := l.rounds[cfg.URL]
	l.rounds[cfg.URL]++
	gate := l.gates[round]
	if gate == nil {
		gate = make(chan struct{})
		l.gates[round] = gate
	}
	// Every URL's n-th round is one pair's round: the pair's two loads
	// must both have started before either answers.
	l.started[round]++
	if l.started[round]%2 == 0 {
		close(gate)
		l.gates[round] = nil
	}
	l.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	if err := l.fail[cfg.URL]; err != nil {
		return Result{}, err
	}
	return l.results[cfg.URL], nil
}

// ticking returns a CPU reading that grows by step at each reading.
func ticking(step time.Duration) func() (time.Duration, error) {
	var mu sync.Mutex
	var n time.Duration
	return func() (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		n += step
		return n, nil
	}
}

func TestPairsRunsBothBuildsAtOnce(t *testing.T) {
	l := newPairLoad(map[string]Result{
		"a": {Requests: 100, Throughput: 100, hist: new(histogram)},
		"b": {Requests: 100, Throughput: 50, hist: new(histogram)},
	})
	a := []Target{{Name: TargetDev, URL: "a", CPU: ticking(10 * time.Millisecond)}}
	b := []Target{{Name: TargetDev, URL: "b", CPU: ticking(20 * time.Millisecond)}}
	// Warmup as long as the measured part: half of each round's CPU counts.
	rows, err := Pairs(t.Context(), a, b, CompareConfig{Concurrency: []int{1, 8}, Rounds: 3,
		Duration: time.Second, Warmup: time.Second, Load: l.load})
	if err != nil {
		t.Fatalf("Pairs() error = %v, want nil", err)
	}
	if len(rows) != 2 || rows[0].Concurrency != 1 || rows[1].Concurrency != 8 {
		t.Fatalf("Pairs() rows = %+v, want one for concurrency 1 and one for 8", rows)
	}
	p := rows[0].Pairs[0]
	for _, r := range p.CPURatios {
		if r != 2 {
			t.Errorf("CPU ratios = %v, want 2 in every round (B spends 20ms a round where A spends 10ms, on as many requests)", p.CPURatios)
			break
		}
	}
	if len(p.CPURatios) != 3 || len(p.RateRatios) != 3 || p.RateRatios[0] != 0.5 {
		t.Errorf("ratios by round = cpu %v, rate %v; want three of each, rate 0.5", p.CPURatios, p.RateRatios)
	}
	if p.A.CPU != 15*time.Millisecond || p.B.CPU != 30*time.Millisecond {
		t.Errorf("CPU = A %v, B %v; want 15ms and 30ms (three rounds, half of each measured)", p.A.CPU, p.B.CPU)
	}
	var out strings.Builder
	if err := ReportPairs(&out, "old", "new", rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"A is old, B is new", "2.000×", "0.500×", "2.000 2.000 2.000"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ReportPairs lacks %q:\n%s", w, out.String())
		}
	}
}

func TestPairsWithoutACPUReading(t *testing.T) {
	errNoProc := errors.New("no /proc here")
	l := newPairLoad(map[string]Result{
		"a": {Requests: 10, Throughput: 10, hist: new(histogram)},
		"b": {Requests: 10, Throughput: 10, hist: new(histogram)},
	})
	a := []Target{{Name: TargetSplit, URL: "a", CPU: ticking(time.Millisecond)}}
	b := []Target{{Name: TargetSplit, URL: "b", CPU: func() (time.Duration, error) { return 0, errNoProc }}}
	rows, err := Pairs(t.Context(), a, b, CompareConfig{Concurrency: []int{1}, Rounds: 2, Load: l.load})
	if err != nil {
		t.Fatalf("Pairs() error = %v, want nil", err)
	}
	p := rows[0].Pairs[0]
	if p.CPURatios != nil || !errors.Is(p.B.CPUError, errNoProc) {
		t.Errorf("CPU ratios %v, B's CPU error %v; want none, and %v", p.CPURatios, p.B.CPUError, errNoProc)
	}
	var out strings.Builder
	if err := ReportPairs(&out, "old", "new", rows); err != nil {
		t.Fatal(err)
	}
	if w := "cpu/req of toolbus split (B) at concurrency 1 unknown: no /proc here"; !strings.Contains(out.String(), w) {
		t.Errorf("ReportPairs lacks %q:\n%s", w, out.String())
	}
}

func TestPairsRefuses(t *testing.T) {
	one := []Target{{Name: TargetDev, URL: "a"}}
	if _, err := Pairs(t.Context(), one, nil, CompareConfig{}); err == nil {
		t.Error("Pairs() of one target and none: error nil, want an error")
	}
	errDown := errors.New("connection refused")
	l := newPairLoad(map[string]Result{"a": {hist: new(histogram)}})
	l.fail = map[string]error{"b": errDown}
	_, err := Pairs(t.Context(), one, []Target{{Name: TargetDev, URL: "b"}}, CompareConfig{Concurrency: []int{1}, Rounds: 1, Load: l.load})
	if !errors.Is(err, errDown) {
		t.Errorf("Pairs() with a failing round: error %v, want %v", err, errDown)
	}
}
