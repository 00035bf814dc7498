package dashboard

import (
	"math"
	"strconv"
	"strings"
)

// The charts are SVG drawn here, by hand, from numbers alone: no text of
// a caller or a tool ever reaches them, so the page may insert them as
// markup. A sparkline needs no library, and the page loads nothing from
// anywhere else.

// series is one line of a chart: its values (a negative value is a gap:
// not known) and the class the page's style sheet colours it by.
type series struct {
	class  string
	values []float64
}

// chart draws the series as lines in a w×h box, all on one scale from 0
// to the largest value (or top, when larger), oldest value at the left.
// A series that is all zero draws a flat line on the bottom edge, so
// that a chart with data always has a line to show.
func chart(w, h int, top float64, lines ...series) string {
	for _, l := range lines {
		for _, v := range l.values {
			top = max(top, v)
		}
	}
	if top <= 0 || math.IsInf(top, 0) || math.IsNaN(top) {
		top = 1
	}
	var b strings.Builder
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 `)
	b.WriteString(strconv.Itoa(w))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(h))
	b.WriteString(`" preserveAspectRatio="none" width="`)
	b.WriteString(strconv.Itoa(w))
	b.WriteString(`" height="`)
	b.WriteString(strconv.Itoa(h))
	b.WriteString(`">`)
	// One pixel of margin keeps a line on the edge visible.
	fw, fh := float64(w), float64(h-2)
	for _, l := range lines {
		n := len(l.values)
		if n == 0 {
			continue
		}
		step := fw / float64(max(n-1, 1))
		var run []float64 // x, y of the points of the line being drawn
		for i := 0; i <= n; i++ {
			if i < n && l.values[i] >= 0 && !math.IsNaN(l.values[i]) {
				run = append(run, float64(i)*step, 1+fh-fh*min(l.values[i], top)/top)
				continue
			}
			if len(run) == 0 {
				continue
			}
			if len(run) == 2 {
				// A lone point is a short dash, so that it shows,
				// drawn inwards from the edge.
				if run[0]+3 > fw {
					run = append([]float64{run[0] - 3, run[1]}, run...)
				} else {
					run = append(run, run[0]+3, run[1])
				}
			}
			b.WriteString(`<polyline class="`)
			b.WriteString(l.class)
			b.WriteString(`" points="`)
			for k := 0; k < len(run); k += 2 {
				if k > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(strconv.FormatFloat(run[k], 'f', 1, 64))
				b.WriteByte(',')
				b.WriteString(strconv.FormatFloat(run[k+1], 'f', 1, 64))
			}
			b.WriteString(`"/>`)
			run = run[:0]
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// floats turns counts into chart values, each divided by per (a rate per
// second from counts per step); a negative count stays a gap.
func floats(v []int64, per float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		if x < 0 {
			out[i] = -1
			continue
		}
		out[i] = float64(x) / per
	}
	return out
}
