// Package testwait lets a test wait for something to happen: it polls a
// condition until it holds, and fails the test with a sentence when it never
// does. [toolbustest.Eventually] is the exported form; this package holds
// the one implementation so that the internal tests of packages the cluster
// itself imports (ingress) can use it without an import cycle.
package testwait

import (
	"testing"
	"time"
)

// Limit is how long [Eventually] waits before it fails the test: generous,
// since it bounds a wait for an event, not a timing goal, and a loaded
// machine must not fail a test that would pass.
const Limit = 30 * time.Second

// Tick is how often [Eventually] asks its condition again.
const Tick = 10 * time.Millisecond

// Eventually returns once cond reports true, asking it at once and then
// every [Tick]; after [Limit] it fails the test with "gave up waiting until
// <what>". Call it from the test's goroutine.
func Eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	eventually(t, cond, what, Limit)
}

func eventually(t testing.TB, cond func() bool, what string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s (%v)", what, limit)
		}
		<-tick.C
	}
}
