package bench

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// splitRound is a round of 10,000 calls of 3s through the ingress, whose
// memory grows by growth bytes, answered in wall.
func splitRound(round int, bin string, growth uint64, wall time.Duration) InFlightSplitResult {
	const before = 35_400_000
	return InFlightSplitResult{Round: round, Binary: bin,
		InFlight: InFlightResult{Batches: 10, Calls: 1000, Sleep: 3 * time.Second, Wall: wall, RSSBefore: before, RSSPeak: before + growth},
		Ingress:  Resident{Pid: 3, Before: before, Peak: before + growth},
		Worker:   Resident{Pid: 2, Before: 33_600_000, Peak: 211_200_000},
		NATS:     Resident{Pid: 1, Before: 36_700_000, Peak: 41_600_000},
	}
}

func TestInFlightSplitVerdicts(t *testing.T) {
	wrong := splitRound(1, "toolbus", 10_000_000, 3200*time.Millisecond)
	wrong.InFlight.Failures = []error{errors.New("batch 3: id 7 not answered")}
	for _, tc := range []struct {
		name      string
		r         InFlightSplitResult
		mem, wall bool
	}{
		{"both met", splitRound(1, "toolbus", 39_000_000, 3400*time.Millisecond), true, true},
		{"4 KB a call is met", splitRound(1, "toolbus", 40_000_000, 3500*time.Millisecond), true, true},
		{"memory missed", splitRound(1, "toolbus", 41_400_000, 3400*time.Millisecond), false, true},
		{"answered late", splitRound(1, "toolbus", 39_000_000, 3569*time.Millisecond), true, false},
		{"answered wrongly", wrong, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := tc.r.Verdicts()
			if len(vs) != 2 {
				t.Fatalf("Verdicts() = %v, want 2", vs)
			}
			if vs[0].Pass != tc.mem || vs[1].Pass != tc.wall {
				t.Errorf("Verdicts() pass = %v, %v, want %v, %v:\n%v\n%v", vs[0].Pass, vs[1].Pass, tc.mem, tc.wall, vs[0], vs[1])
			}
		})
	}
}

func TestReportInFlightSplit(t *testing.T) {
	var out strings.Builder
	if err := ReportInFlightSplit(&out, splitRound(2, "/tmp/toolbus-before", 50_200_000, 3479*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"round 2, /tmp/toolbus-before: 10 batches of 1000 sleep calls of 3s at once\n",
		"  ingress RSS (pid 3)  35.4 → 85.6 MB (+50.2 MB, 5.02 KB a call)\n",
		"  answered in          3.479s (479ms after the sleep)\n",
		"  worker RSS (pid 2)   33.6 → 211.2 MB (+177.6 MB)\n",
		"  NATS RSS (pid 1)     36.7 → 41.6 MB (+4.9 MB)\n",
		"MISS  10000 calls in flight through one ingress of a split deployment: its resident memory grows ≤ 40 MB (4 KB a call): got +50.2 MB, 5.02 KB a call (missed by 10.2 MB)\n",
		"PASS  10000 calls in flight answered within 500ms of the tools' 3s: got 3.479s (21ms to spare)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ReportInFlightSplit lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReportInFlightSplitRuns(t *testing.T) {
	var out strings.Builder
	err := ReportInFlightSplitRuns(&out, []InFlightSplitResult{
		splitRound(1, "before", 50_200_000, 3479*time.Millisecond),
		splitRound(1, "after", 39_000_000, 3400*time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := [][]string{
		{"round", "program", "ingress RSS", "per call", "answered in", "worker RSS", "NATS RSS", "memory", "answered"},
		{"1", "before", "35.4 → 85.6 MB (+50.2)", "5.02 KB", "3.479s", "33.6 → 211.2 MB", "36.7 → 41.6 MB", "MISS", "PASS"},
		{"1", "after", "35.4 → 74.4 MB (+39.0)", "3.90 KB", "3.4s", "33.6 → 211.2 MB", "36.7 → 41.6 MB", "PASS", "PASS"},
	}
	if len(lines) != len(want) {
		t.Fatalf("ReportInFlightSplitRuns wrote %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, cells := range want {
		rest := lines[i]
		for _, c := range cells {
			j := strings.Index(rest, c)
			if j < 0 {
				t.Errorf("line %d = %q, want %q in this order", i, lines[i], cells)
				break
			}
			rest = rest[j+len(c):]
		}
	}
}

// TestSplitMemory reads this process's memory as the three processes':
// the first read is the memory before, the most the peak, and a process
// that cannot be read fails the first read only.
func TestSplitMemory(t *testing.T) {
	self := os.Getpid()
	if _, err := processRSS(self); err != nil {
		t.Skipf("no resident memory to read: %v", err)
	}
	m := splitMemory{seen: [3]Resident{{Pid: self}, {Pid: self}, {Pid: 0}}}
	if _, err := m.sample(); err == nil {
		t.Fatal("first sample of pid 0 = nil error, want one")
	}
	m.seen[2].Pid = self
	for range 3 {
		got, err := m.sample()
		if err != nil || got == 0 {
			t.Fatalf("sample() = %d, %v, want this process's memory", got, err)
		}
	}
	m.seen[1].Pid = 0 // as if the worker could no longer be read
	if _, err := m.sample(); err != nil {
		t.Errorf("sample() with the worker unread = %v, want nil", err)
	}
	for i, r := range m.seen {
		if r.Before == 0 || r.Peak < r.Before {
			t.Errorf("seen[%d] = %+v, want memory before and a peak at least as high", i, r)
		}
	}
}

func TestInFlightSplitRunConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  InFlightSplitRunConfig
		ok   bool
	}{
		{"zero takes the defaults", InFlightSplitRunConfig{}, true},
		{"negative rounds", InFlightSplitRunConfig{Rounds: -1}, false},
		{"negative calls", InFlightSplitRunConfig{Calls: -1}, false},
		{"sleep under a millisecond", InFlightSplitRunConfig{Sleep: time.Microsecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.defaults()
			if (err == nil) != tc.ok {
				t.Fatalf("defaults() = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (cfg.Rounds != 1 || cfg.Batches != 10 || cfg.Calls != 1000 || cfg.Sleep != 3*time.Second) {
				t.Errorf("defaults() gave %+v, want 1 round of 10 batches of 1000 calls of 3s", cfg)
			}
		})
	}
	w, in := InFlightSplitRunConfig{Batches: 10, Calls: 1000}.splitArgs()
	if got, want := strings.Join(append(w, in...), " "), "--concurrency 20000 --auth off --max-in-flight 12000 --batch-concurrency 1000"; got != want {
		t.Errorf("splitArgs() = %q, want %q", got, want)
	}
}
