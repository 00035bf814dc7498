package bench

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// turns records which target served each stretch of requests, one entry
// per change of target.
type turns struct {
	mu  sync.Mutex
	log []string
}

func (tr *turns) handler(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		if len(tr.log) == 0 || tr.log[len(tr.log)-1] != name {
			tr.log = append(tr.log, name)
		}
		tr.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func TestCompare(t *testing.T) {
	var tr turns
	a := Target{Name: "plain", URL: serve(t, tr.handler("a", PlainEcho()))}
	b := Target{Name: "other", URL: serve(t, tr.handler("b", PlainEcho()))}
	cs, err := Compare(t.Context(), a, b, CompareConfig{
		Concurrency: []int{1, 4},
		Rounds:      2,
		Duration:    100 * time.Millisecond,
		Warmup:      -1,
	})
	if err != nil {
		t.Fatalf("Compare() error = %v, want nil", err)
	}
	if got, want := tr.log, []string{"a", "b", "a", "b", "a", "b", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("order of targets = %v, want %v", got, want)
	}
	if len(cs) != 2 {
		t.Fatalf("len(Compare()) = %d, want 2", len(cs))
	}
	for i, c := range cs {
		if want := []int{1, 4}[i]; c.Concurrency != want {
			t.Errorf("comparison %d: Concurrency = %d, want %d", i, c.Concurrency, want)
		}
		for _, s := range []Side{c.Baseline, c.Subject} {
			r := s.Result
			if len(s.Rounds) != 2 {
				t.Errorf("%s at %d: %d rounds, want 2", s.Target.Name, c.Concurrency, len(s.Rounds))
			}
			if r.Concurrency != c.Concurrency {
				t.Errorf("%s at %d: Result.Concurrency = %d, want %d", s.Target.Name, c.Concurrency, r.Concurrency, c.Concurrency)
			}
			if r.Requests == 0 || r.Errors != 0 {
				t.Errorf("%s at %d: Requests, Errors = %d, %d, want some, 0", s.Target.Name, c.Concurrency, r.Requests, r.Errors)
			}
			if want := median(s.Rounds); r.Throughput != want {
				t.Errorf("%s at %d: Throughput = %v, want the median round %v", s.Target.Name, c.Concurrency, r.Throughput, want)
			}
		}
		if want := c.Subject.Result.Throughput / c.Baseline.Result.Throughput; c.Ratio != want {
			t.Errorf("at %d: Ratio = %v, want %v", c.Concurrency, c.Ratio, want)
		}
		if want := c.Subject.Result.Mean - c.Baseline.Result.Mean; c.AddedMean != want {
			t.Errorf("at %d: AddedMean = %v, want %v", c.Concurrency, c.AddedMean, want)
		}
	}
	if got := cs[0].Baseline.Target; got.Name != a.Name || got.URL != a.URL || cs[0].Subject.Target.Name != b.Name || cs[0].Subject.Target.URL != b.URL {
		t.Errorf("targets = %v, %v, want %v, %v", cs[0].Baseline.Target, cs[0].Subject.Target, a, b)
	}
}

func TestCompareCountsTheSubjectsErrors(t *testing.T) {
	a := Target{Name: "plain", URL: serve(t, PlainEcho())}
	b := Target{Name: "broken", URL: serve(t, http.NotFoundHandler())}
	cs, err := Compare(t.Context(), a, b, CompareConfig{Concurrency: []int{2}, Rounds: 1, Duration: 50 * time.Millisecond, Warmup: -1})
	if err != nil {
		t.Fatalf("Compare() error = %v, want nil", err)
	}
	if got := cs[0].Subject.Result; got.Requests != 0 || got.Errors == 0 {
		t.Errorf("subject Requests, Errors = %d, %d, want 0, some", got.Requests, got.Errors)
	}
	if cs[0].Ratio != 0 {
		t.Errorf("Ratio = %v, want 0", cs[0].Ratio)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"one", []float64{3}, 3},
		{"odd", []float64{9, 1, 5}, 5},
		{"even", []float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := median(tt.in); got != tt.want {
				t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
			}
			if !slices.Equal(tt.in, in) {
				t.Errorf("median modified its input: %v, want %v", tt.in, in)
			}
		})
	}
}
