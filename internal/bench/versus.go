package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Pair is one target of two builds, A and B, measured at the same time
// in every round by [Pairs].
type Pair struct {
	A, B Side
	// CPURatios is B's CPU time per request over A's, round by round;
	// empty when either is not known. RateRatios is B's throughput over
	// A's, round by round (0 for a round in which A answered nothing).
	CPURatios, RateRatios []float64
}

// PairRow is what [Pairs] measured at one concurrency.
type PairRow struct {
	Concurrency int
	Pairs       []Pair
}

// Pairs measures two builds side by side at the same time: in every
// round, at each of cfg.Concurrency, it runs cfg.Load against a[i] and
// b[i] at once, and reads the CPU time of both around the round. Whatever
// else the machine does in a round falls on both builds alike, so the
// ratio of their figures within one round moves far less than the figures
// do from one round to the next; [Matrix], which takes targets in turn,
// cannot see a change smaller than that movement. a[i] and b[i] are the
// same target of the two builds; a and b must be as long. It returns one
// [PairRow] per concurrency; when a round fails it returns the rows
// finished so far and the error.
func Pairs(ctx context.Context, a, b []Target, cfg CompareConfig) ([]PairRow, error) {
	if len(a) == 0 || len(a) != len(b) {
		return nil, fmt.Errorf("bench: pairs of %d and %d targets: want as many of each, at least one", len(a), len(b))
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	perRound := cfg.Warmup + cfg.Duration
	cfg.Progress.planTime(time.Duration(len(cfg.Concurrency)*cfg.Rounds*len(a))*perRound, "req")
	measured := cfg.measured()
	var out []PairRow
	for _, c := range cfg.Concurrency {
		row := PairRow{Concurrency: c, Pairs: make([]Pair, len(a))}
		rounds := make([][2][]Result, len(a))
		cpu := make([][2]time.Duration, len(a))
		cpuErr := make([][2]error, len(a))
		for range cfg.Rounds {
			for i := range a {
				sides := [2]Target{a[i], b[i]}
				var before, after [2]time.Duration
				for k, t := range sides {
					if t.CPU != nil && cpuErr[i][k] == nil {
						before[k], cpuErr[i][k] = t.CPU()
					}
				}
				var res [2]Result
				var errs [2]error
				// A side that fails ends its pair's round: the other
				// side's figures would be of a round alone.
				rctx, cancel := context.WithCancel(ctx)
				var wg sync.WaitGroup
				for k, t := range sides {
					wg.Go(func() {
						if res[k], errs[k] = cfg.Load(rctx, cfg.round(t, c)); errs[k] != nil {
							cancel()
						}
					})
				}
				wg.Wait()
				cancel()
				for k, build := range [2]string{"A", "B"} {
					if errs[k] != nil {
						return out, fmt.Errorf("bench: %s of build %s at concurrency %d: %w", sides[k].Name, build, c, errs[k])
					}
				}
				var spent [2]time.Duration
				for k, t := range sides {
					if t.CPU != nil && cpuErr[i][k] == nil {
						if after[k], cpuErr[i][k] = t.CPU(); cpuErr[i][k] == nil {
							spent[k] = time.Duration(float64(after[k]-before[k]) * measured)
							cpu[i][k] += spent[k]
						}
					}
					rounds[i][k] = append(rounds[i][k], res[k])
				}
				p := &row.Pairs[i]
				p.RateRatios = append(p.RateRatios, rateRatio(res[0], res[1]))
				known := sides[0].CPU != nil && sides[1].CPU != nil && cpuErr[i] == [2]error{}
				if known && res[0].Requests > 0 && res[1].Requests > 0 && spent[0] > 0 && spent[1] > 0 {
					perA := float64(spent[0]) / float64(res[0].Requests)
					perB := float64(spent[1]) / float64(res[1].Requests)
					p.CPURatios = append(p.CPURatios, perB/perA)
				}
			}
		}
		for i := range a {
			p := &row.Pairs[i]
			p.A = mergeRounds(a[i], rounds[i][0])
			p.B = mergeRounds(b[i], rounds[i][1])
			p.A.CPU, p.A.CPUError = cpu[i][0], cpuErr[i][0]
			p.B.CPU, p.B.CPUError = cpu[i][1], cpuErr[i][1]
			if len(p.CPURatios) != cfg.Rounds {
				p.CPURatios = nil // a round without a reading: no ratio stands for all
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// rateRatio is b's throughput over a's; 0 when a answered nothing.
func rateRatio(a, b Result) float64 {
	if a.Throughput <= 0 {
		return 0
	}
	return b.Throughput / a.Throughput
}

// ReportPairs writes what [Pairs] measured: per target and concurrency,
// each build's throughput and CPU time per request, and B's over A's, as
// the median of the rounds' ratios and round by round.
func ReportPairs(w io.Writer, nameA, nameB string, rows []PairRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no pairs")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "two builds at the same time: A is %s, B is %s; in each round both serve the same load from load generators of their own at once, "+
		"so that the machine's noise falls on both; B/A is the median of the rounds' ratios, and the CPU ratio of each round follows\n", nameA, nameB)
	fmt.Fprintf(tw, "concurrency\ttarget\tA req/s\tB req/s\tB/A req/s\tA cpu/req\tB cpu/req\tB/A cpu/req\tcpu ratio by round\terrors A B\n")
	for _, r := range rows {
		for _, p := range r.Pairs {
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d %d\n",
				r.Concurrency, p.A.Target.Name, p.A.Result.Throughput, p.B.Result.Throughput,
				ratioText(median(p.RateRatios), len(p.RateRatios) > 0),
				cpuText(p.A), cpuText(p.B),
				ratioText(median(p.CPURatios), len(p.CPURatios) > 0),
				ratioList(p.CPURatios), p.A.Result.Errors, p.B.Result.Errors)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, p := range r.Pairs {
			for _, s := range []struct {
				build string
				side  Side
			}{{"A", p.A}, {"B", p.B}} {
				if s.side.CPUError != nil {
					if _, err := fmt.Fprintf(w, "cpu/req of %s (%s) at concurrency %d unknown: %v\n", s.side.Target.Name, s.build, r.Concurrency, s.side.CPUError); err != nil {
						return err
					}
				}
				if e := s.side.Result.FirstError; e != nil {
					if _, err := fmt.Fprintf(w, "%s (%s) at concurrency %d: %d requests failed, for example: %v\n", s.side.Target.Name, s.build, r.Concurrency, s.side.Result.Errors, e); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func cpuText(s Side) string {
	if d, ok := s.CPUPerRequest(); ok {
		return formatDuration(d)
	}
	return "-"
}

func ratioText(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', 3, 64) + "×"
}

func ratioList(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(parts, " ")
}
