package worker

import (
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/testwait"
)

// TestRunners checks that calls run one after the other share one
// runner, that calls running at once each get a runner of their own
// (run never waits), and that the runners exit when done closes.
func TestRunners(t *testing.T) {
	done := make(chan struct{})
	p := newRunners(done)
	ran := make(chan struct{}, 100)
	p.run(func() { ran <- struct{}{} })
	<-ran
	for range 99 {
		// The runner waits for the next call once it has run one: the
		// call is handed to it, as run does when a runner is idle.
		testwait.Eventually(t, func() bool {
			select {
			case p.work <- func() { ran <- struct{}{} }:
				return true
			default:
				return false
			}
		}, "the runner waits for the next call")
		<-ran
	}
	if n := p.started.Load(); n != 1 {
		t.Errorf("runners started for 100 calls one after the other = %d, want 1", n)
	}

	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		p.run(func() {
			defer wg.Done()
			<-release
		})
	}
	if n := p.started.Load(); n < 10 {
		t.Errorf("runners started once 10 calls run at once = %d, want at least 10", n)
	}
	close(release)
	wg.Wait()
	close(done)
	testwait.Eventually(t, func() bool { return p.live.Load() == 0 }, "every runner exits once done is closed")
}
