package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketRange(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 123456789, math.MaxInt64, math.MaxUint64} {
		i := bucketOf(v)
		lo, w := bucketRange(i)
		if v < lo || v-lo >= w {
			t.Errorf("value %d in bucket %d = [%d, %d+%d), want it inside", v, i, lo, lo, w)
		}
		if i >= nBuckets {
			t.Errorf("bucketOf(%d) = %d, want < %d", v, i, nBuckets)
		}
		if v >= subCount && float64(w)/float64(lo) > 1.0/half {
			t.Errorf("bucket of %d is %d wide from %d, want at most 1/%d", v, w, lo, half)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	seq := func(from, to, step time.Duration) []time.Duration {
		var ds []time.Duration
		for d := from; d <= to; d += step {
			ds = append(ds, d)
		}
		return ds
	}
	tests := []struct {
		name   string
		values []time.Duration
		// want maps a quantile to its value; precision is the relative
		// error allowed.
		want      map[float64]time.Duration
		wantMean  time.Duration
		precision float64
	}{
		{"empty", nil, map[float64]time.Duration{0.5: 0, 0.99: 0, 1: 0}, 0, 0},
		{"one value", []time.Duration{42 * time.Microsecond}, map[float64]time.Duration{
			0: 42 * time.Microsecond, 0.5: 42 * time.Microsecond, 1: 42 * time.Microsecond}, 42 * time.Microsecond, 0},
		{"1..100ns, exact below 128", seq(1, 100, 1), map[float64]time.Duration{
			0: 1, 0.01: 1, 0.5: 50, 0.9: 90, 0.99: 99, 1: 100}, 50, 0},
		{"1..10000µs", seq(time.Microsecond, 10*time.Millisecond, time.Microsecond), map[float64]time.Duration{
			0.5: 5 * time.Millisecond, 0.9: 9 * time.Millisecond, 0.99: 9900 * time.Microsecond, 1: 10 * time.Millisecond},
			5000500 * time.Nanosecond, 0.01},
		{"two clusters", append(slices.Repeat([]time.Duration{time.Millisecond}, 90), slices.Repeat([]time.Duration{time.Second}, 10)...),
			map[float64]time.Duration{0.5: time.Millisecond, 0.9: time.Millisecond, 0.91: time.Second, 0.99: time.Second},
			100900 * time.Microsecond, 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, v := range tt.values {
				h.record(v)
			}
			for q, want := range tt.want {
				if got := h.quantile(q); !near(got, want, tt.precision) {
					t.Errorf("quantile(%v) = %v, want %v within %v", q, got, want, tt.precision)
				}
			}
			if got := h.mean(); got != tt.wantMean {
				t.Errorf("mean() = %v, want %v", got, tt.wantMean)
			}
		})
	}
}

// TestHistogramPrecision checks every percentile of random latencies against
// the exact one from sorting.
func TestHistogramPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var values []time.Duration
	var h histogram
	for range 20000 {
		// Log-uniform from 1µs to 1s, as latencies spread.
		v := time.Duration(math.Exp(rng.Float64()*math.Log(1e6)) * 1e3)
		values = append(values, v)
		h.record(v)
	}
	slices.Sort(values)
	for p := 1; p <= 100; p++ {
		q := float64(p) / 100
		want := values[int(math.Ceil(q*float64(len(values))))-1]
		if got := h.quantile(q); !near(got, want, 1.0/subCount) {
			t.Errorf("quantile(%v) = %v, want %v within %.2f%%", q, got, want, 100.0/subCount)
		}
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	var got histogram
	got.merge(&a)
	got.merge(&histogram{})
	got.merge(&b)
	if got != all {
		t.Errorf("merge of parts: n=%d min=%d max=%d sum=%v, want n=%d min=%d max=%d sum=%v",
			got.n, got.min, got.max, got.sum, all.n, all.min, all.max, all.sum)
	}
}

func near(got, want time.Duration, precision float64) bool {
	return math.Abs(float64(got-want)) <= precision*float64(want)
}
