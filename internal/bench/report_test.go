package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func comparison(conc int, ratio float64, added time.Duration, subjectErrors int64) Comparison {
	base := Side{Target: Target{Name: "plain"}, Result: Result{Throughput: 20000, Requests: 40000, Mean: 40 * time.Microsecond}, Rounds: []float64{19000, 20000, 21000}}
	sub := Side{Target: Target{Name: "toolbus"}, Result: Result{Throughput: 20000 * ratio, Requests: 100, Errors: subjectErrors, Mean: 40*time.Microsecond + added}, Rounds: []float64{1, 2, 3}}
	if subjectErrors > 0 {
		sub.Result.FirstError = ErrStatus
	}
	return Comparison{Concurrency: conc, Baseline: base, Subject: sub, Ratio: ratio, AddedMean: added}
}

func TestReportCompare(t *testing.T) {
	tests := []struct {
		name         string
		cs           []Comparison
		wantVerdicts int
		wantLines    []string
	}{
		{"both pass", []Comparison{comparison(1, 0.4, 42*time.Microsecond, 0), comparison(64, 0.62, 0, 0)}, 2, []string{
			"PASS  toolbus added mean latency at concurrency 1 ≤ 60µs: got +42µs (18µs to spare)",
			"PASS  toolbus echo throughput at concurrency 64 ≥ 0.50× plain: got 0.62× (0.12× to spare)",
			"1            b/a      0.40×",
		}},
		{"both miss", []Comparison{comparison(1, 0.4, 75*time.Microsecond, 0), comparison(64, 0.4, 0, 0)}, 2, []string{
			"MISS  toolbus added mean latency at concurrency 1 ≤ 60µs: got +75µs (missed by 15µs)",
			"MISS  toolbus echo throughput at concurrency 64 ≥ 0.50× plain: got 0.40× (missed by 0.10×, 20% short)",
		}},
		{"errors miss", []Comparison{comparison(64, 0.9, 0, 3)}, 1, []string{
			"MISS  toolbus echo throughput at concurrency 64 ≥ 0.50× plain: got 0.90× (toolbus had 3 errors, first: " + ErrStatus.Error() + ")",
		}},
		{"no goal at other concurrencies", []Comparison{comparison(8, 0.1, time.Second, 0)}, 0, []string{
			"echo: plain (a) vs toolbus (b), 3 alternating rounds each",
			"19000 20000 21000",
		}},
		{"nothing", nil, 0, []string{"no comparisons"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := ReportCompare(&sb, tt.cs); err != nil {
				t.Fatalf("ReportCompare() error = %v", err)
			}
			got := sb.String()
			for _, want := range tt.wantLines {
				if !strings.Contains(got, want) {
					t.Errorf("ReportCompare() =\n%s\nwant a line with %q", got, want)
				}
			}
			verdicts := 0
			for line := range strings.Lines(got) {
				if strings.HasPrefix(line, "PASS") || strings.HasPrefix(line, "MISS") {
					verdicts++
				}
			}
			if verdicts != tt.wantVerdicts {
				t.Errorf("ReportCompare() =\n%s\nwant %d verdicts", got, tt.wantVerdicts)
			}
		})
	}
}

func TestReportBatches(t *testing.T) {
	walls := func(ds ...time.Duration) Batches {
		return Batches{Walls: ds}.summarise()
	}
	failed := walls(101*time.Millisecond, 300*time.Millisecond)
	failed.Failures = []error{errors.New("batch 2: " + ErrMissingID.Error())}
	tests := []struct {
		name   string
		report func(*strings.Builder) error
		want   []string
	}{
		{"fan-out pass", func(sb *strings.Builder) error {
			return ReportFanOut(sb, FanOutResult{Calls: 100, Ideal: 100 * time.Millisecond, Batches: walls(104*time.Millisecond, 103*time.Millisecond, 140*time.Millisecond)})
		}, []string{
			"PASS  fan-out of 100×100ms answered in ≤ 130ms (median of 3): got 104ms (26ms to spare)",
			"3        103ms  104ms   140ms  0",
		}},
		{"fan-out miss", func(sb *strings.Builder) error {
			return ReportFanOut(sb, FanOutResult{Calls: 100, Ideal: 100 * time.Millisecond, Batches: walls(150 * time.Millisecond)})
		}, []string{"MISS  fan-out of 100×100ms answered in ≤ 130ms (median of 1): got 150ms (missed by 20ms)"}},
		{"fan-out wrong answers", func(sb *strings.Builder) error {
			return ReportFanOut(sb, FanOutResult{Calls: 100, Ideal: 100 * time.Millisecond, Batches: failed})
		}, []string{"MISS  fan-out of 100×100ms", "1 of 2 batches answered wrongly, first: batch 2: bench: id not answered"}},
		{"fan-out no answer", func(sb *strings.Builder) error {
			return ReportFanOut(sb, FanOutResult{Calls: 100, Ideal: 100 * time.Millisecond})
		}, []string{"MISS  fan-out of 100×100ms", "got no answer (no batch was answered)"}},
		{"slow pass", func(sb *strings.Builder) error {
			return ReportSlow(sb, SlowResult{Echoes: 9, Sleep: 10 * time.Second, Timeout: 300 * time.Millisecond, Batches: walls(301*time.Millisecond, 302*time.Millisecond)})
		}, []string{
			"slow backend: one sleep call of 10s and 9 echo calls, Toolbus-Timeout 300ms",
			"PASS  slow-backend batch answered within 300ms deadline + 50ms with every other result present (median of 2): got 301.5ms (48.5ms to spare)",
		}},
		{"slow miss", func(sb *strings.Builder) error {
			return ReportSlow(sb, SlowResult{Echoes: 9, Sleep: 10 * time.Second, Timeout: 300 * time.Millisecond, Batches: walls(10 * time.Second)})
		}, []string{"MISS  slow-backend batch", "got 10s (missed by 9.65s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := tt.report(&sb); err != nil {
				t.Fatalf("report error = %v", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(sb.String(), want) {
					t.Errorf("report =\n%s\nwant a line with %q", sb.String(), want)
				}
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{999, "999ns"},
		{52345 * time.Nanosecond, "52.35µs"},
		{123456 * time.Nanosecond, "123.5µs"},
		{1234567 * time.Nanosecond, "1.235ms"},
		{-52345 * time.Nanosecond, "-52.35µs"},
		{10*time.Second + 4*time.Millisecond, "10s"},
	}
	for _, tt := range tests {
		if got := formatDuration(tt.in); got != tt.want {
			t.Errorf("formatDuration(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestReportJobs(t *testing.T) {
	measured := func(ops float64, p50 time.Duration, errs int64) Result {
		r := Result{Concurrency: 16, Requests: 1000, Throughput: ops, P50: p50, Errors: errs}
		if errs > 0 {
			r.FirstError = errors.New("boom")
		}
		return r
	}
	tests := []struct {
		name string
		r    JobsResult
		want []string
	}{
		{"both pass", JobsResult{Method: "echo", Poll: measured(5000, 200*time.Microsecond, 0), Submit: measured(8000, 2*time.Millisecond, 0),
			Jobs: 16000, Drained: 1500 * time.Millisecond, RunRate: 4571}, []string{
			"submit  16           8000",
			"ran: 16000 jobs submitted (warmup included), the last of each submitter succeeded 1.5s after the last submit: 4571 jobs/s end to end",
			"PASS  job submits ≥ 5000/s (concurrency 16, echo jobs): got 8000/s (3000/s to spare)",
			"PASS  job poll p50 ≤ 1ms (rpc.jobs.get, concurrency 16): got 200µs (800µs to spare)",
		}},
		{"both miss", JobsResult{Method: "echo", Poll: measured(500, 2*time.Millisecond, 0), Submit: measured(4000, 4*time.Millisecond, 0), Jobs: 8000}, []string{
			"ran: 8000 jobs submitted; not all were seen to succeed",
			"MISS  job submits ≥ 5000/s (concurrency 16, echo jobs): got 4000/s (missed by 1000/s, 20% short)",
			"MISS  job poll p50 ≤ 1ms (rpc.jobs.get, concurrency 16): got 2ms (missed by 1ms)",
		}},
		{"errors miss whatever the numbers", JobsResult{Method: "echo", Poll: measured(5000, 200*time.Microsecond, 3), Submit: measured(8000, time.Millisecond, 2)}, []string{
			"MISS  job submits ≥ 5000/s (concurrency 16, echo jobs): got 8000/s (2 errors, first: boom)",
			"MISS  job poll p50 ≤ 1ms (rpc.jobs.get, concurrency 16): got 200µs (3 errors, first: boom)",
		}},
		{"nothing measured", JobsResult{Method: "echo"}, []string{
			"(no job was submitted)", "(no poll was answered)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := ReportJobs(&sb, tt.r); err != nil {
				t.Fatalf("ReportJobs() error = %v", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(sb.String(), want) {
					t.Errorf("ReportJobs() =\n%s\nwant a line with %q", sb.String(), want)
				}
			}
		})
	}
}

func TestReportWebSocket(t *testing.T) {
	side := func(name string, rps float64, mean time.Duration) Side {
		return Side{Target: Target{Name: name}, Result: Result{Throughput: rps, Mean: mean, Requests: 100}, Rounds: []float64{rps}}
	}
	var sb strings.Builder
	err := ReportWebSocket(&sb, WebSocketResult{Concurrency: 64, HTTP: side("HTTP", 20000, 3*time.Millisecond),
		WS: side("WebSocket", 30000, 2*time.Millisecond), Ratio: 1.5, AddedMean: -time.Millisecond})
	if err != nil {
		t.Fatalf("ReportWebSocket() error = %v", err)
	}
	for _, want := range []string{
		"websocket: 64 callers of echo sharing one WebSocket connection vs one HTTP client, 1 alternating rounds each",
		"HTTP            20000",
		"WebSocket       30000",
		"WebSocket/HTTP  1.50×", "-1ms",
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("ReportWebSocket() =\n%s\nwant a line with %q", sb.String(), want)
		}
	}
}
