package ingress

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// netBarrierIdle is how long the barrier's reader stays without a wait
// before it ends; the next wait starts another.
const netBarrierIdle = 50 * time.Millisecond

// netBarrier runs a function after the process's next network poll.
//
// On a saturated core the Go runtime polls the network only when its run
// queues are empty, and otherwise about every 10 ms: a caller whose next
// request waits in its socket is read only then, while the calls already
// read keep the core busy. Work that waits for the barrier lets every
// connection be read first.
//
// The barrier is a pipe whose reader is parked in the network poller: a
// byte written to it makes the reader runnable only when the poller
// runs, together with every connection that has something to read. When
// the process is not saturated, an idle processor polls at once, and the
// barrier costs a pipe write and read. Where the pipe cannot be made, the
// function runs at once on a goroutine of its own: no barrier, the same
// progress.
//
// Its zero value is ready. The reader runs only while waits come: it
// starts with a wait and ends after [netBarrierIdle] without one, or when
// the barrier closes. It is safe for concurrent use.
type netBarrier struct {
	mu      sync.Mutex
	r, w    *os.File
	reading bool // a reader runs
	// broken is set when the pipe could not be made, closed by close:
	// waits then run their function at once.
	broken, closed bool
	readers        sync.WaitGroup

	// pending is set while a byte is on its way to the reader; the waits
	// made meanwhile share it.
	pending atomic.Bool
	// fn is what runs after the poll; the latest wait sets it.
	fn atomic.Pointer[func()]
}

// await runs fn after the next network poll. A wait made while another is
// pending shares its poll: the latest function then runs once for both,
// after the poll. A function may run once more than it was waited for
// (when the barrier closes), so it must be harmless to run again.
func (b *netBarrier) await(fn func()) {
	b.mu.Lock()
	if b.r == nil && !b.broken && !b.closed {
		var err error
		if b.r, b.w, err = os.Pipe(); err != nil {
			b.broken = true
		}
	}
	if b.broken || b.closed {
		b.mu.Unlock()
		go fn()
		return
	}
	b.fn.Store(&fn)
	if !b.reading {
		b.reading = true
		b.readers.Add(1)
		go b.read()
	}
	// Under the lock, so that a reader about to end for want of waits
	// sees it.
	poke := b.pending.CompareAndSwap(false, true)
	b.mu.Unlock()
	if poke {
		// The byte is written by a goroutine of its own, which the
		// runtime runs once the caller blocks: should the caller be the
		// reader itself (its function ended a round), the reader is
		// parked again by then, and the byte wakes it at the next poll
		// rather than at once.
		go b.poke()
	}
}

// poke writes the byte that wakes the reader; when the pipe is closed,
// it runs the function itself.
func (b *netBarrier) poke() {
	if _, err := b.w.Write([]byte{0}); err != nil {
		b.pending.Store(false)
		b.run()
	}
}

// run runs the latest function waited for.
func (b *netBarrier) run() {
	if fn := b.fn.Load(); fn != nil {
		(*fn)()
	}
}

// read runs the function after each wake, until no wait came for
// netBarrierIdle or the pipe closed.
func (b *netBarrier) read() {
	defer b.readers.Done()
	buf := make([]byte, 64)
	for {
		_ = b.r.SetReadDeadline(time.Now().Add(netBarrierIdle))
		_, err := b.r.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.mu.Lock()
			if !b.pending.Load() {
				b.reading = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			continue
		}
		// Cleared before the function runs, so that a wait it makes, or
		// one made meanwhile, writes a byte again.
		b.pending.Store(false)
		b.run()
		if err != nil {
			b.mu.Lock()
			b.reading = false
			b.mu.Unlock()
			return
		}
	}
}

// close ends the reader and waits for it; waits made afterwards run
// their function at once.
func (b *netBarrier) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	w := b.w
	b.mu.Unlock()
	if w == nil {
		return
	}
	_ = w.Close()
	b.readers.Wait()
	_ = b.r.Close()
}
