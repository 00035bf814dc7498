package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// A chart draws the latencies of one or more [Result]s as a text histogram:
// one row per bucket, the buckets log-spaced between the smallest and the
// largest latency of all of them, each row with the bucket's range and,
// per result, its count and a bar scaled to that result's largest count.
// Sharing the buckets lets two results (a baseline and toolbus, or two
// phases) be read side by side; scaling each to its own largest count
// compares their shapes even when one answered twice as often.
const (
	// chartMinRows is the fewest rows a chart aims for: it picks the
	// coarsest bucket ladder that gives at least as many (a narrow range
	// may give fewer, at the finest ladder).
	chartMinRows = 8
	// chartBarWidth is the width of the longest bar, in cells.
	chartBarWidth = 20
)

// ladders are the bucket edges a chart can use within one decade, coarsest
// first: each is roughly evenly spaced on a log scale and every edge is a
// round number (20µs, 25µs, 31.5µs), so that the rows read easily. The
// coarsest with at least chartMinRows rows over the range is used; as each
// ladder is at most twice as dense as the one before, that gives at most
// about twice chartMinRows.
var ladders = [][]float64{
	{1},
	{1, 3},
	{1, 2, 5},
	{1, 1.5, 2, 3, 5, 7},
	{1, 1.25, 1.6, 2, 2.5, 3.2, 4, 5, 6.3, 8},
	{1, 1.12, 1.25, 1.4, 1.6, 1.8, 2, 2.24, 2.5, 2.8, 3.15, 3.55, 4, 4.5, 5, 5.6, 6.3, 7.1, 8, 9},
}

// chartSeries is one named column of a chart.
type chartSeries struct {
	name string
	r    Result
}

// chartEdges returns the bucket edges of a chart of values from lo to hi
// (nanoseconds, lo ≤ hi): edges[0] ≤ lo < ... and hi < edges[len-1], so
// that bucket i holds edges[i] ≤ v < edges[i+1]. It picks the coarsest
// ladder that gives at least chartMinRows buckets.
func chartEdges(lo, hi uint64) []uint64 {
	lo = max(lo, 1)
	hi = max(hi, lo)
	var edges []uint64
	for _, l := range ladders {
		edges = ladderEdges(l, lo, hi)
		if len(edges)-1 >= chartMinRows {
			break
		}
	}
	return edges
}

// ladderEdges returns the edges of ladder l from the largest at or below lo
// to the smallest above hi. Edges are whole nanoseconds; the fractions of
// the lowest decades, which round to the same nanosecond, appear once.
func ladderEdges(l []float64, lo, hi uint64) []uint64 {
	var edges []uint64
	for decade := math.Pow(10, math.Floor(math.Log10(float64(lo)))); ; decade *= 10 {
		for _, m := range l {
			e := uint64(math.Round(m * decade))
			switch {
			case e <= lo:
				// Only the last edge at or below lo is kept.
				edges = append(edges[:0], e)
			case len(edges) == 0 || e > edges[len(edges)-1]:
				edges = append(edges, e)
				if e > hi {
					return edges
				}
			}
		}
	}
}

// chartCounts returns how many of h's values fall in each bucket between
// edges. A value of h is known to its bucket of the recording histogram,
// 0.8% wide; it counts where that bucket's middle falls.
func chartCounts(h *histogram, edges []uint64) []uint64 {
	counts := make([]uint64, len(edges)-1)
	if h == nil || h.n == 0 {
		return counts
	}
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		lo, w := bucketRange(i)
		v := min(max(lo+(w-1)/2, h.min), h.max)
		// The first edge above v closes v's bucket.
		j, _ := slices.BinarySearch(edges, v+1)
		counts[min(max(j-1, 0), len(counts)-1)] += c
	}
	return counts
}

// writeChart writes a blank line, then a chart of the latencies of ss to w
// under title, then per series its p50, p90, p99 and max. It writes nothing
// when no series recorded a latency.
func writeChart(w io.Writer, title string, ss ...chartSeries) error {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, s := range ss {
		if h := s.r.hist; h != nil && h.n > 0 {
			lo, hi = min(lo, h.min), max(hi, h.max)
		}
	}
	if hi == 0 && lo == math.MaxUint64 {
		return nil
	}
	edges := chartEdges(lo, hi)
	counts := make([][]uint64, len(ss))
	for i, s := range ss {
		counts[i] = chartCounts(s.r.hist, edges)
	}

	labels := make([]string, len(edges))
	labelWidth := 0
	for i, e := range edges {
		labels[i] = formatDuration(time.Duration(e))
		labelWidth = max(labelWidth, utf8.RuneCountInString(labels[i]))
	}
	ranges := make([]string, len(edges)-1)
	for i := range ranges {
		ranges[i] = fmt.Sprintf("%*s – %*s", labelWidth, labels[i], labelWidth, labels[i+1])
	}
	rangeWidth := 2*labelWidth + 3
	countWidth := make([]int, len(ss))
	for i := range ss {
		for _, c := range counts[i] {
			countWidth[i] = max(countWidth[i], len(strconv.FormatUint(c, 10)))
		}
	}

	var b strings.Builder
	b.WriteString("\n" + title + "\n")
	header := fmt.Sprintf("%-*s", rangeWidth, "latency")
	for i, s := range ss {
		header += fmt.Sprintf("  %-*s", countWidth[i]+1+chartBarWidth, s.name)
	}
	b.WriteString(strings.TrimRight(header, " ") + "\n")
	for row, r := range ranges {
		line := fmt.Sprintf("%-*s", rangeWidth, r)
		for i := range ss {
			largest := slices.Max(counts[i])
			var share float64
			if largest > 0 {
				share = float64(counts[i][row]) / float64(largest)
			}
			line += fmt.Sprintf("  %*d %s", countWidth[i], counts[i][row], bar(share, chartBarWidth))
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, s := range ss {
		h := s.r.hist
		if h == nil || h.n == 0 {
			fmt.Fprintf(tw, "%s\tno latencies\n", s.name)
			continue
		}
		fmt.Fprintf(tw, "%s\tp50 %s\tp90 %s\tp99 %s\tmax %s\n", s.name,
			formatDuration(h.quantile(0.50)), formatDuration(h.quantile(0.90)),
			formatDuration(h.quantile(0.99)), formatDuration(h.quantile(1)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}
