package worker

import (
	"sync/atomic"
	"time"
)

// runnerIdle is how long a runner waits for the next call before it
// exits.
const runnerIdle = time.Second

// runners runs the handlers of calls on goroutines that outlive one call.
// A new goroutine starts with a small stack and grows it by copying as the
// call's path deepens (tracing, decoding, the handler, the answer's
// encoding); a goroutine started for every call paid that again each
// time, about a fifth of the CPU of a flood of short calls. A runner keeps
// its grown stack for the next call. A runner idle for [runnerIdle], or
// once done is closed, exits, so that a burst leaves no goroutines behind
// for long. It is safe for concurrent use.
type runners struct {
	work chan func()
	done <-chan struct{}
	// started and live count the runners started and those not exited.
	started, live atomic.Int64
}

func newRunners(done <-chan struct{}) *runners {
	return &runners{work: make(chan func()), done: done}
}

// run runs f on an idle runner, or on a new one when none is idle. It
// never waits for a runner.
func (p *runners) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		p.live.Add(1)
		go p.loop(f)
	}
}

func (p *runners) loop(f func()) {
	defer p.live.Add(-1)
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(runnerIdle)
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		case <-p.done:
			return
		}
	}
}
