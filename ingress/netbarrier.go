package ingress

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// netBarrierIdle is how long the barrier's reader stays without a wait
// before it ends and closes its pipe; the next wait makes another.
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
// runs, together with every connection that has something to read. A byte
// written before the reader was parked would be read at once, without a
// poll: the reader tells such a byte from one it was woken by, and asks
// for another. Woken, the reader yields once before it runs the
// function, as the poller may hand it back before the connections it
// found ready too: their requests are read first. When the process is
// not saturated, an idle processor polls at once, and the barrier costs
// a pipe write and read. Where the pipe
// cannot be made, the function runs at once on a goroutine of its own: no
// barrier, the same progress.
//
// Its zero value is ready. The reader and its pipe live only while waits
// come: they are made by a wait, and end after [netBarrierIdle] without
// one, or when the barrier closes. It is safe for concurrent use.
type netBarrier struct {
	// idle is how long the reader stays without a wait (0:
	// [netBarrierIdle]).
	idle time.Duration

	mu sync.Mutex
	// r and w are the pipe; nil while no reader runs.
	r, w *os.File
	// broken is set when a pipe could not be made, closed by close:
	// waits then run their function at once.
	broken, closed bool
	readers        sync.WaitGroup

	// pending is set while a byte is on its way to the reader; the waits
	// made meanwhile share it.
	pending atomic.Bool
	// fn is what runs after the poll; the latest wait sets it.
	fn atomic.Pointer[func()]
	// waiters are the goroutines blocked in wait, released by the next
	// wake; guarded by mu.
	waiters []chan struct{}
	// reads numbers the reader's reads, and wroteIn is the number of the
	// read under way when the latest byte was written: a byte written
	// before the read that returns it began did not wait for a poll.
	reads, wroteIn atomic.Uint64
}

// await runs fn after the next network poll. A wait made while another is
// pending shares its poll: the latest function then runs once for both,
// after the poll. A function may run once more than it was waited for
// (when the barrier closes), so it must be harmless to run again.
func (b *netBarrier) await(fn func()) {
	b.mu.Lock()
	if !b.start() {
		b.mu.Unlock()
		go fn()
		return
	}
	b.fn.Store(&fn)
	b.pokeLocked()
}

// wait blocks until the next network poll, or until the barrier closes,
// and reports whether it waited: false when the barrier is closed or has
// no pipe. The function of the latest await runs after that poll too.
func (b *netBarrier) wait() bool {
	b.mu.Lock()
	if !b.start() {
		b.mu.Unlock()
		return false
	}
	ch := make(chan struct{})
	b.waiters = append(b.waiters, ch)
	b.pokeLocked()
	<-ch
	return true
}

// start makes the pipe and its reader when none runs, and reports whether
// the barrier works; b.mu is held.
func (b *netBarrier) start() bool {
	if !b.broken && !b.closed && b.r == nil {
		r, w, err := os.Pipe()
		if err != nil {
			b.broken = true
		} else {
			b.r, b.w = r, w
			b.readers.Add(1)
			go b.read(r)
		}
	}
	return !b.broken && !b.closed
}

// pokeLocked makes sure a byte is on its way to the reader, and unlocks
// b.mu.
func (b *netBarrier) pokeLocked() {
	// Under the lock, so that a reader about to end for want of waits
	// sees it.
	poke := b.pending.CompareAndSwap(false, true)
	w := b.w
	b.mu.Unlock()
	if poke {
		// The byte is written by a goroutine of its own, which the
		// runtime runs once the caller blocks: should the caller be the
		// reader itself (its function ended a round), the reader is
		// parked again by then.
		go b.poke(w)
	}
}

// poke writes the byte that wakes the reader; when the pipe is closed,
// it runs the function itself.
func (b *netBarrier) poke(w *os.File) {
	b.wroteIn.Store(b.reads.Load())
	if _, err := w.Write([]byte{0}); err != nil {
		b.pending.Store(false)
		b.release()
		b.run()
	}
}

// release lets every goroutine blocked in wait go on.
func (b *netBarrier) release() {
	b.mu.Lock()
	ws := b.waiters
	b.waiters = nil
	b.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// run runs the latest function waited for.
func (b *netBarrier) run() {
	if fn := b.fn.Load(); fn != nil {
		(*fn)()
	}
}

// read runs the function after each wake, until no wait came for the
// idle time or the pipe closed; then it closes the pipe.
func (b *netBarrier) read(r *os.File) {
	defer b.readers.Done()
	idle := b.idle
	if idle <= 0 {
		idle = netBarrierIdle
	}
	buf := make([]byte, 64)
	for {
		_ = r.SetReadDeadline(time.Now().Add(idle))
		n := b.reads.Add(1)
		_, err := r.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.mu.Lock()
			if !b.pending.Load() {
				// No byte is on its way: nobody writes to w any more.
				_ = b.w.Close()
				_ = r.Close()
				b.r, b.w = nil, nil
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			continue
		}
		if err == nil && b.wroteIn.Load() < n {
			// Written before this read began, so read without a poll:
			// ask again, once parked. pending stays set.
			b.mu.Lock()
			w := b.w
			b.mu.Unlock()
			go b.poke(w)
			continue
		}
		// The poll that woke the reader made runnable every connection
		// with something to read, and the reader may be the first of
		// them to run: it lets them run before its function, so that
		// the requests they read are queued before it chooses a round.
		// A wait made during the yield shares this wake and goes on
		// after it without a poll of its own: taking the waiters and
		// clearing pending before the yield, so that it waits for the
		// next poll, was measured and kept the victim of a flood no
		// better than without the yield (BENCHMARKS.md).
		runtime.Gosched()
		// Cleared before the function runs, so that a wait it makes, or
		// one made meanwhile, writes a byte again.
		b.pending.Store(false)
		b.release()
		b.run()
		if err != nil {
			_ = r.Close()
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
	b.w = nil
	b.mu.Unlock()
	if w != nil {
		_ = w.Close()
	}
	b.readers.Wait()
	b.release()
}
