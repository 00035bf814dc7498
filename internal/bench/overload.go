package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// Goals of the overload scenario: admitted calls keep their latency and
// memory stays bounded under ten times the load the cluster serves.
const (
	GoalOverloadP99Ratio = 2.0      // admitted p99 under overload ≤ this × the p99 at capacity
	GoalOverloadHeap     = 64 << 20 // heap growth under overload, bytes
)

// OverloadConfig configures [Overload]. The cluster behind URL must cap
// the calls of the sleep method in flight at Capacity (for example with
// --method-max-in-flight sleep=32), so that Capacity concurrent clients
// are the load it serves.
type OverloadConfig struct {
	URL string
	// Capacity is the cluster's cap on sleep calls in flight (default 32).
	Capacity int
	// Factor is how many times Capacity the overload phase's clients are
	// (default 10).
	Factor int
	// Sleep is the length of each call (default 20ms).
	Sleep time.Duration
	// Duration is the length of each phase (default 2s).
	Duration time.Duration
	// Heap reports the heap in use of the process serving the cluster
	// (default: this process's, for the in-process cluster of toolbus
	// bench).
	Heap func() uint64
	// Progress, when not nil, is planned for both phases and counts their
	// calls, refused ones included. Optional.
	Progress *Progress
}

// OverloadResult is what [Overload] measured.
type OverloadResult struct {
	Capacity, Factor int
	Sleep            time.Duration
	// AtCapacity is Capacity clients; Overloaded is Capacity×Factor
	// clients, whose Requests are the admitted calls and Errors the
	// refused and failed ones.
	AtCapacity, Overloaded Result
	// Refused counts -32002 answers; Failed any other failure, with an
	// example in FirstFailure.
	Refused, Failed int64
	FirstFailure    error
	// HeapBefore and HeapPeak are the heap in use before the overload
	// phase and the most seen during it.
	HeapBefore, HeapPeak uint64
}

var errRefused = errors.New("bench: refused (-32002)")

// Overload measures admission control: first Capacity clients call sleep
// in a closed loop (the load the cluster serves), then Capacity×Factor
// clients do. A refused client waits the retry_after_ms it was given (at
// most a second) before calling again, as a well-behaved agent does.
func Overload(ctx context.Context, cfg OverloadConfig) (OverloadResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return OverloadResult{}, fmt.Errorf("bench: overload: %w", err)
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 32
	}
	if cfg.Factor <= 0 {
		cfg.Factor = 10
	}
	if cfg.Sleep <= 0 {
		cfg.Sleep = 20 * time.Millisecond
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 2 * time.Second
	}
	if cfg.Heap == nil {
		cfg.Heap = heapInUse
	}
	res := OverloadResult{Capacity: cfg.Capacity, Factor: cfg.Factor, Sleep: cfg.Sleep}
	body := []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"sleep","params":{"ms":%d}}`, cfg.Sleep.Milliseconds()))
	clients := cfg.Capacity * cfg.Factor
	client := newClient(clients)
	defer client.CloseIdleConnections()
	header := requestHeader(nil)

	var refused, failed atomic.Int64
	var firstMu sync.Mutex
	op := func(ctx context.Context, _ int) error {
		var buf bytes.Buffer
		if err := post(ctx, client, cfg.URL, header, body, &buf); err != nil {
			return fail(&failed, &firstMu, &res.FirstFailure, err)
		}
		var r schema.Response
		if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
			return fail(&failed, &firstMu, &res.FirstFailure, err)
		}
		switch {
		case r.Error == nil && len(r.Result) > 0:
			return nil
		case r.Error != nil && r.Error.Code == schema.CodeOverloaded:
			refused.Add(1)
			var data struct {
				RetryAfterMS int64 `json:"retry_after_ms"`
			}
			json.Unmarshal(r.Error.Data, &data)
			wait := min(time.Duration(data.RetryAfterMS)*time.Millisecond, time.Second)
			ctxwait.Sleep(ctx, wait)
			return errRefused
		case r.Error != nil:
			return fail(&failed, &firstMu, &res.FirstFailure, r.Error)
		}
		return fail(&failed, &firstMu, &res.FirstFailure, ErrNotJSONRPC)
	}

	loop := func(clients int) LoopConfig {
		return LoopConfig{Concurrency: clients, Duration: cfg.Duration, Warmup: cfg.Duration / 4, progress: cfg.Progress}
	}
	cfg.Progress.planTime(2*(cfg.Duration+cfg.Duration/4), "req")
	var err error
	res.AtCapacity, err = Loop(ctx, loop(cfg.Capacity), op)
	if err != nil {
		return res, err
	}
	refused.Store(0)
	runtime.GC()
	res.HeapBefore = cfg.Heap()
	res.HeapPeak = res.HeapBefore
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if h := cfg.Heap(); h > res.HeapPeak {
					res.HeapPeak = h
				}
			}
		}
	}()
	res.Overloaded, err = Loop(ctx, loop(clients), op)
	close(stop)
	<-sampled
	res.Refused, res.Failed = refused.Load(), failed.Load()
	return res, err
}

func fail(n *atomic.Int64, mu *sync.Mutex, first *error, err error) error {
	n.Add(1)
	mu.Lock()
	if *first == nil {
		*first = err
	}
	mu.Unlock()
	return err
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Verdicts judges r against the overload goals.
func (r OverloadResult) Verdicts() []Verdict {
	goal := fmt.Sprintf("admitted p99 at %d× the served load ≤ %.0f× the p99 at capacity", r.Factor, GoalOverloadP99Ratio)
	lat := Verdict{Goal: goal}
	switch {
	case r.AtCapacity.Requests == 0 || r.Overloaded.Requests == 0:
		lat.Margin = "not judged: a phase admitted no call"
	default:
		ratio := float64(r.Overloaded.P99) / float64(r.AtCapacity.P99)
		lat.Got = fmt.Sprintf("%s vs %s (%.2f×)", formatDuration(r.Overloaded.P99), formatDuration(r.AtCapacity.P99), ratio)
		lat.Pass = ratio <= GoalOverloadP99Ratio && r.Failed == 0
		lat.Margin = fmt.Sprintf("%.2f× to spare", GoalOverloadP99Ratio-ratio)
		if !lat.Pass {
			lat.Margin = fmt.Sprintf("missed by %.2f×", ratio-GoalOverloadP99Ratio)
			if r.Failed > 0 {
				lat.Margin = fmt.Sprintf("%d calls failed otherwise than refused: %v", r.Failed, r.FirstFailure)
			}
		}
	}
	grew := int64(r.HeapPeak) - int64(r.HeapBefore)
	mem := Verdict{
		Goal:   fmt.Sprintf("heap growth at %d× the served load ≤ %d MiB", r.Factor, GoalOverloadHeap>>20),
		Got:    fmt.Sprintf("%.1f MiB (%.1f → %.1f MiB in use)", float64(grew)/(1<<20), float64(r.HeapBefore)/(1<<20), float64(r.HeapPeak)/(1<<20)),
		Pass:   grew <= GoalOverloadHeap,
		Margin: fmt.Sprintf("%.1f MiB to spare", float64(GoalOverloadHeap-grew)/(1<<20)),
	}
	if !mem.Pass {
		mem.Margin = fmt.Sprintf("missed by %.1f MiB", float64(grew-GoalOverloadHeap)/(1<<20))
	}
	return []Verdict{lat, mem}
}

// ReportOverload writes a table of r to w, then its verdicts and a
// histogram of the admitted calls' latencies in both phases.
func ReportOverload(w io.Writer, r OverloadResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "overload: sleep %s calls, the cluster admits %d in flight; %d clients, then %d× as many honouring retry_after_ms\n",
		formatDuration(r.Sleep), r.Capacity, r.Capacity, r.Factor)
	fmt.Fprintln(tw, "phase\tclients\tadmitted/s\tp50\tp90\tp99\tmax\tadmitted\trefused\tfailed")
	for _, p := range []struct {
		name    string
		r       Result
		refused int64
		failed  int64
	}{{"capacity", r.AtCapacity, r.AtCapacity.Errors, 0}, {"overload", r.Overloaded, r.Refused, r.Failed}} {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", p.name, p.r.Concurrency, p.r.Throughput,
			formatDuration(p.r.P50), formatDuration(p.r.P90), formatDuration(p.r.P99), formatDuration(p.r.Max),
			p.r.Requests, p.refused, p.failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeVerdicts(w, r.Verdicts()...); err != nil {
		return err
	}
	return writeChart(w, "overload latency of admitted calls", chartSeries{"capacity", r.AtCapacity}, chartSeries{"overload", r.Overloaded})
}
