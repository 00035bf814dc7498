package bench

import (
	"strings"
	"testing"
	"time"
)

// TestInFlight runs a small in-flight scenario against the fake toolbus
// and checks what it reports, not how fast.
func TestInFlight(t *testing.T) {
	url := serve(t, fakeToolbus{})
	rss := uint64(10_000_000)
	r, err := InFlight(t.Context(), InFlightConfig{URL: url, Batches: 3, Calls: 5, Sleep: 10 * time.Millisecond,
		RSS: func() (uint64, error) { rss += 1_000_000; return rss, nil }})
	if err != nil {
		t.Fatalf("InFlight() error = %v, want nil", err)
	}
	if r.RSSBefore != 11_000_000 || r.RSSPeak <= r.RSSBefore || r.Wall < r.Sleep || len(r.Failures) != 0 {
		t.Errorf("InFlight() = %+v, want the memory before, a higher peak, a wall of at least the sleep, no failure", r)
	}
	var out strings.Builder
	if err := ReportInFlight(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"in flight: 3 batches of 5 sleep calls of 10ms", "PASS  15 calls in flight in one process: resident memory ≤ 100 MB"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ReportInFlight lacks %q:\n%s", w, out.String())
		}
	}
}
