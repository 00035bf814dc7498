package bench

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear: values below subCount are counted exactly,
// and each power of two above is split into half equal buckets, so a bucket
// is never wider than 1/half of its lower bound. Reporting a bucket's middle
// keeps every quantile within 1/subCount (0.8%) of the true value, in a
// fixed 30 KiB whatever the length of the run.
const (
	subBits  = 7
	subCount = 1 << subBits
	half     = subCount / 2
	nBuckets = (64-subBits)*half + subCount
)

// histogram records durations in nanoseconds. Its zero value is empty and
// ready; it is not safe for concurrent use (each load worker has its own,
// merged at the end).
type histogram struct {
	counts   [nBuckets]uint64
	n        uint64
	sum      float64 // nanoseconds; float so that long runs cannot overflow
	min, max uint64
}

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits
	return shift*half + int(v>>shift)
}

// bucketRange returns the smallest value bucket i holds and its width.
func bucketRange(i int) (lo, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	shift := i/half - 1
	sub := uint64(i%half + half)
	return sub << shift, 1 << shift
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// quantile returns the value at or below which a fraction q of the recorded
// values lie (nearest rank), within the histogram's precision; the ends are
// exact: quantile(0) is the minimum and quantile(1) the maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The small epsilon keeps a rank such as 0.9×100 from rounding up to 91
	// through float error.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + (w-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
