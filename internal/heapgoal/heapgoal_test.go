package heapgoal

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPercentFor checks the GOGC chosen for a live heap: enough for the
// headroom, never below the process's own, never above maxPercent.
func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{live: 4 * mib, headroom: 16 * mib, base: 100, want: 400},
		{live: 16 * mib, headroom: 16 * mib, base: 100, want: 100},
		{live: 64 * mib, headroom: 16 * mib, base: 100, want: 100},
		{live: 4 * mib, headroom: 16 * mib, base: 800, want: 800},
		{live: 1, headroom: 16 * mib, base: 100, want: maxPercent},
		{live: 0, headroom: 16 * mib, base: 100, want: maxPercent},
	} {
		if got := percentFor(tc.live, tc.headroom, tc.base); got != tc.want {
			t.Errorf("percentFor(live %d, headroom %d, base %d) = %d, want %d", tc.live, tc.headroom, tc.base, got, tc.want)
		}
	}
}

// TestKeepRaisesTheGoal starts a keeper with a headroom far above this
// test's live heap, and checks, at the collection that follows, that
// GOGC leaves that headroom; then that Stop gives the process its own
// GOGC back, and that a second keeper is refused while one keeps.
func TestKeepRaisesTheGoal(t *testing.T) {
	own := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(own) })
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	set := make(chan int, 16)
	const headroom = 256 << 20
	k, why := keep(headroom, func(p int) { set <- p })
	if k == nil {
		t.Fatalf("keep refused: %s", why)
	}
	defer k.Stop()
	if other, why := Keep(headroom); other != nil || why == "" {
		t.Errorf("a second Keep = %v, %q; want nil and a reason while one keeps", other, why)
	}
	runtime.GC()
	var p int
	select {
	case p = <-set:
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for the keeper to set GOGC after a collection (%v)", testwait.Limit)
	}
	live := readLive()
	if want := percentFor(live, headroom, 100); p < want*7/8 || p > want*9/8 {
		t.Errorf("GOGC set to %d for a live heap of %d bytes, want about %d", p, live, want)
	}
	if got := readPercent(); got != p {
		t.Errorf("the runtime's GOGC = %d, want the %d set", got, p)
	}
	// The keeper hears of every collection, not only the first: with its
	// record of the GOGC set put back, the next collection sets it again.
	k.mu.Lock()
	k.percent = 100
	k.mu.Unlock()
	runtime.GC()
	select {
	case <-set:
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for the keeper to hear of a second collection (%v)", testwait.Limit)
	}
	// The way back to the process's own pace is taken however small the
	// step: with GOGC a little above it and a live heap past the
	// headroom, it is set back.
	k.mu.Lock()
	k.percent, k.headroom = 105, 1
	k.mu.Unlock()
	runtime.GC()
	select {
	case p = <-set:
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for the keeper to set GOGC back (%v)", testwait.Limit)
	}
	if p != 100 {
		t.Errorf("GOGC set to %d with a live heap past the headroom, want the process's own 100", p)
	}
	k.Stop()
	if got := readPercent(); got != 100 {
		t.Errorf("GOGC after Stop = %d, want the process's own 100", got)
	}
	k.Stop()
	again, why := Keep(headroom)
	if again == nil {
		t.Fatalf("Keep after Stop refused: %s", why)
	}
	again.Stop()
}

// TestKeepLeavesAnOperatorsChoice checks that Keep keeps nothing, and
// says why, when the environment sets GOGC or GOMEMLIMIT or no headroom
// is asked for.
func TestKeepLeavesAnOperatorsChoice(t *testing.T) {
	for _, tc := range []struct {
		name, gogc, limit string
		headroom          uint64
	}{
		{"GOGC set", "200", "", 1 << 20},
		{"GOMEMLIMIT set", "", "1GiB", 1 << 20},
		{"no headroom", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GOMEMLIMIT", tc.limit)
			if k, why := Keep(tc.headroom); k != nil || why == "" {
				if k != nil {
					k.Stop()
				}
				t.Errorf("Keep = %v, %q; want nil and a reason", k, why)
			}
		})
	}
}
