package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// cappedSleeper admits max sleep calls at once and refuses the rest with
// -32002, as an ingress with a per-method cap does.
func cappedSleeper(max int, broken bool) http.Handler {
	slots := make(chan struct{}, max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if broken {
			fmt.Fprint(w, `{"jsonrpc":"2.0","error":{"code":-32603,"message":"internal error"},"id":1}`)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			time.Sleep(5 * time.Millisecond)
			fmt.Fprint(w, `{"jsonrpc":"2.0","result":{"slept_ms":5},"id":1}`)
		default:
			fmt.Fprint(w, `{"jsonrpc":"2.0","error":{"code":-32002,"message":"overloaded","data":{"retry_after_ms":10,"limit":"method_max_in_flight"}},"id":1}`)
		}
	})
}

func TestOverload(t *testing.T) {
	for _, tc := range []struct {
		name       string
		broken     bool
		wantFailed bool
	}{
		{"admission caps the load", false, false},
		{"failures are not refusals", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(cappedSleeper(4, tc.broken))
			defer ts.Close()
			heap := uint64(10 << 20)
			r, err := Overload(context.Background(), OverloadConfig{
				URL: ts.URL, Capacity: 4, Factor: 5, Sleep: 5 * time.Millisecond, Duration: 200 * time.Millisecond,
				Heap: func() uint64 { heap += 1 << 10; return heap },
			})
			if err != nil {
				t.Fatalf("Overload: %v", err)
			}
			if tc.wantFailed {
				if r.Failed == 0 || r.FirstFailure == nil {
					t.Fatalf("Failed = %d (%v), want failures counted apart from refusals", r.Failed, r.FirstFailure)
				}
				if v := r.Verdicts(); v[0].Pass {
					t.Fatalf("verdict %v passes with failures", v[0])
				}
				return
			}
			if r.AtCapacity.Requests == 0 || r.Overloaded.Requests == 0 {
				t.Fatalf("admitted %d and %d, want calls admitted in both phases", r.AtCapacity.Requests, r.Overloaded.Requests)
			}
			if r.Refused == 0 || r.Failed != 0 {
				t.Fatalf("refused %d failed %d (%v), want refusals and no failures at 5× the cap", r.Refused, r.Failed, r.FirstFailure)
			}
			if r.Overloaded.Concurrency != 20 {
				t.Fatalf("overload clients = %d, want 20", r.Overloaded.Concurrency)
			}
			if r.HeapPeak <= r.HeapBefore {
				t.Fatalf("heap peak %d not above %d: the sampler did not run", r.HeapPeak, r.HeapBefore)
			}
			var out strings.Builder
			if err := ReportOverload(&out, r); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"overload: sleep", "capacity", "admitted p99 at 5×", "heap growth at 5×"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestOverloadVerdictMath(t *testing.T) {
	r := OverloadResult{Factor: 10,
		AtCapacity: Result{Requests: 10, P99: 20 * time.Millisecond},
		Overloaded: Result{Requests: 10, P99: 50 * time.Millisecond},
		HeapBefore: 10 << 20, HeapPeak: 100 << 20}
	v := r.Verdicts()
	if v[0].Pass || !strings.Contains(v[0].Margin, "missed by 0.50×") {
		t.Errorf("latency verdict = %+v, want a miss by 0.50×", v[0])
	}
	if v[1].Pass || !strings.Contains(v[1].Margin, "missed by 26.0 MiB") {
		t.Errorf("heap verdict = %+v, want a miss by 26 MiB", v[1])
	}
}
