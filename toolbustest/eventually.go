package toolbustest

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testwait"
)

// Eventually waits for something a test cannot be told of directly: it
// returns once cond reports true, asking it every few milliseconds, and
// fails the test with "gave up waiting until <what>" after a generous limit
// (30 seconds) that bounds a hang, not a timing goal. what says what
// happens, as in "the job succeeds". Call it from the test's goroutine.
//
//	toolbustest.Eventually(t, func() bool { return reg.Known("math.add") }, "the registry knows math.add")
func Eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	testwait.Eventually(t, cond, what)
}
