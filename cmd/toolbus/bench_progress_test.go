package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// progressLineRE matches a progress line as bench draws it.
var progressLineRE = regexp.MustCompile(`\[[█▏▎▍▌▋▊▉ ]{20}\] +\d+%`)

// TestBenchProgress runs a short bench with the progress line on and off,
// standard output and error into one buffer as on a terminal, and checks
// what a terminal would show: the reports, and no progress line left over.
// Whether a line was drawn at all depends on the machine's speed, so the
// test does not ask for one.
func TestBenchProgress(t *testing.T) {
	t.Setenv(runMainEnv, "1") // the targets and load generators are this binary
	args := []string{"bench", "--binary", os.Args[0], "--duration", "300ms", "--rounds", "1", "--concurrency", "1",
		"--targets", "plain,dev", "--skip-inflight", "--skip-scenarios", "--skip-jobs", "--skip-ws", "--skip-overload"}
	for _, mode := range []string{"on", "off"} {
		t.Run(mode, func(t *testing.T) {
			out, err := execute(t, context.Background(), append(args, "--progress", mode)...)
			if err != nil {
				t.Fatalf("bench --progress %s: %v\n%s", mode, err, out)
			}
			if mode == "off" && strings.Contains(out, "\r") {
				t.Errorf("bench --progress off printed a carriage return:\n%q", out)
			}
			shown := terminal(out)
			for _, l := range shown {
				if progressLineRE.MatchString(l) {
					t.Errorf("bench --progress %s left a progress line on the screen: %q", mode, l)
				}
			}
			screen := strings.Join(shown, "\n")
			for _, want := range []string{"echo, measured from a load generator process of its own", "added mean latency at concurrency 1", "echo latency at concurrency 1"} {
				if !strings.Contains(screen, want) {
					t.Errorf("bench --progress %s showed no %q:\n%s", mode, want, screen)
				}
			}
		})
	}
}

func TestBenchProgressRejectsUnknownMode(t *testing.T) {
	t.Setenv("TOOLBUS_PROGRESS", "sometimes")
	_, err := execute(t, context.Background(), "bench", "--skip-compare", "--skip-scenarios", "--skip-jobs", "--skip-ws", "--skip-overload")
	if err == nil || !strings.Contains(err.Error(), "--progress") {
		t.Fatalf("bench with TOOLBUS_PROGRESS=sometimes = %v, want an error naming --progress", err)
	}
}

// terminal returns the lines a terminal shows for out: a carriage return
// moves back to the start of the line, and what follows overwrites it.
func terminal(out string) []string {
	var lines []string
	var line []rune
	col := 0
	for _, r := range out {
		switch r {
		case '\n':
			lines = append(lines, strings.TrimRight(string(line), " "))
			line, col = line[:0], 0
		case '\r':
			col = 0
		default:
			if col < len(line) {
				line[col] = r
			} else {
				line = append(line, r)
			}
			col++
		}
	}
	return append(lines, strings.TrimRight(string(line), " "))
}
