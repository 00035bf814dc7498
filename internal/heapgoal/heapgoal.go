// Package heapgoal keeps the garbage collector from running more often
// than the memory it would save is worth.
//
// The collector's pace is GOGC: with its default of 100 the next
// collection starts once the heap has grown by as much as was live after
// the last. A process whose live heap is small, as an ingress or a worker
// between bursts is (a few MiB), then collects every few MiB it
// allocates: under a flood of 500-call batches `toolbus dev` collected
// about 70 times a second (BENCHMARKS.md, "A heap goal with headroom"). [Keep] raises GOGC after
// each collection so that the next heap goal is at least a headroom
// above the live heap, and lowers it back to the process's own GOGC as
// the live heap grows: a large live heap is collected exactly as before,
// and a small one costs at most the headroom in memory.
//
// An operator who sets GOGC or GOMEMLIMIT in the environment has chosen
// the collector's pace, and Keep leaves it alone.
package heapgoal

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the GOGC that Keep sets, whatever the live heap: a
// goal a thousand times the live heap is already far more than any
// headroom asks of a heap of a few KiB.
const maxPercent = 100_000

// Keeper is the keeping of one headroom, from [Keep] to [Keeper.Stop].
type Keeper struct {
	headroom uint64
	base     int
	// set, when not nil, is told each GOGC set (tests wait on it).
	set func(percent int)

	mu      sync.Mutex
	stopped bool
	percent int // the GOGC set last
}

// active is the Keeper of the process, if any: the collector's pace is
// the process's, so only one may keep it.
var (
	activeMu sync.Mutex
	active   *Keeper
)

// Keep keeps the heap goal at least headroom bytes above the live heap
// after each collection, never with a GOGC below the process's own, and
// returns the keeper, or nil with the reason when it keeps nothing: the
// headroom is 0, the environment sets GOGC or GOMEMLIMIT, the collector
// is off, or another keeper keeps the process's goal already.
func Keep(headroom uint64) (*Keeper, string) {
	return keep(headroom, nil)
}

func keep(headroom uint64, set func(int)) (*Keeper, string) {
	switch {
	case headroom == 0:
		return nil, "no headroom asked for"
	case os.Getenv("GOGC") != "":
		return nil, "GOGC is set in the environment"
	case os.Getenv("GOMEMLIMIT") != "":
		return nil, "GOMEMLIMIT is set in the environment"
	}
	activeMu.Lock()
	defer activeMu.Unlock()
	if active != nil {
		return nil, "another keeper keeps the heap goal"
	}
	// Read once no keeper holds the pace, so that the process's own is
	// read, not one a keeper set.
	base := readPercent()
	if base < 0 {
		return nil, "the collector is off"
	}
	k := &Keeper{headroom: headroom, base: base, set: set, percent: base}
	active = k
	k.arm()
	return k, ""
}

// Stop ends the keeping and gives the process its own GOGC back. It may
// be called more than once.
func (k *Keeper) Stop() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.stopped = true
	debug.SetGCPercent(k.base)
	k.mu.Unlock()
	activeMu.Lock()
	if active == k {
		active = nil
	}
	activeMu.Unlock()
}

// sentinel is what each collection frees, so that the keeper hears of
// it: large enough, and holding a pointer, so that the allocator never
// packs it with other objects that would keep it alive.
type sentinel struct {
	_ *byte
	_ [32]byte
}

// arm makes a sentinel that the next collection frees, which calls
// collected.
func (k *Keeper) arm() {
	runtime.AddCleanup(new(sentinel), (*Keeper).collected, k)
}

// collected sets GOGC for the live heap the last collection left, and
// arms for the next.
func (k *Keeper) collected() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	percent := percentFor(readLive(), k.headroom, k.base)
	// A change of less than an eighth is not worth a word to the
	// runtime, but the way back to the process's own pace always is.
	if d := percent - k.percent; percent != k.percent && (percent == k.base || d > k.percent/8 || -d > k.percent/8) {
		debug.SetGCPercent(percent)
		k.percent = percent
		if k.set != nil {
			k.set(percent)
		}
	}
	k.arm()
}

// percentFor returns the GOGC whose goal, for a live heap of live bytes,
// is at least headroom above it: never below base, nor above maxPercent.
func percentFor(live, headroom uint64, base int) int {
	if live == 0 {
		return maxPercent
	}
	need := headroom * 100 / live
	if need > maxPercent {
		return maxPercent
	}
	return max(base, int(need))
}

var (
	liveMetric    = "/gc/heap/live:bytes"
	percentMetric = "/gc/gogc:percent"
)

func readLive() uint64 {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func readPercent() int {
	s := []metrics.Sample{{Name: percentMetric}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
