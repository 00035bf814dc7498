package ingress

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNetBarrier checks that every wait's function runs after it, that
// waits made while one is pending share its run, that a function may wait
// again (as a round that ends does), and that after close a wait runs its
// function at once instead of never.
func TestNetBarrier(t *testing.T) {
	var b netBarrier
	ran := make(chan struct{}, 100)
	fn := func() { ran <- struct{}{} }
	b.await(fn)
	<-ran

	// Many waits at once: each is followed by a run, and no run is lost,
	// however they share.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { b.await(fn) })
	}
	wg.Wait()
	<-ran // at least one run after them all

	// A function that waits again, three times: the reader writes to its
	// own pipe and is woken again.
	var mu sync.Mutex
	left := 3
	again := make(chan struct{})
	var once sync.Once
	var loop func()
	loop = func() {
		mu.Lock()
		defer mu.Unlock()
		if left == 0 {
			// A function may run once more than it was waited for.
			once.Do(func() { close(again) })
			return
		}
		left--
		b.await(loop)
	}
	b.await(loop)
	<-again

	b.close()
	done := make(chan struct{})
	b.await(func() { close(done) })
	<-done
	b.close() // twice is harmless
}

// TestNetBarrierUnused checks that closing a barrier that never waited
// starts nothing.
func TestNetBarrierUnused(t *testing.T) {
	var b netBarrier
	b.close()
	done := make(chan struct{})
	b.await(func() { close(done) })
	<-done
}

// TestNetBarrierReaderEnds checks that the reader ends, and closes its
// pipe, once no wait comes (a server used only as a handler, never shut
// down, keeps no goroutine and no file), and that the next wait makes
// another.
func TestNetBarrierReaderEnds(t *testing.T) {
	b := netBarrier{idle: time.Millisecond}
	defer b.close()
	for range 2 {
		ran := make(chan struct{})
		b.await(func() { close(ran) })
		<-ran
		b.readers.Wait() // returns once the reader has ended for want of waits
		b.mu.Lock()
		r, w := b.r, b.w
		b.mu.Unlock()
		if r != nil || w != nil {
			t.Fatal("the reader ended but left its pipe open")
		}
	}
}

// TestNetBarrierWaitsForPoll checks the barrier's point: on one processor
// kept busy by a goroutine that yields but never blocks, the function
// does not run until that goroutine is done and the runtime polls the
// network. A function run at once, or a byte read without a poll, runs it
// while the goroutine still yields. The runtime also polls every 10 ms
// when it has not otherwise, which a loaded machine can make the yields
// outlast, so the test tries a few times and needs one clean run.
func TestNetBarrierWaitsForPoll(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var b netBarrier
	defer b.close()
	for _, how := range []struct {
		name  string
		start func(ran *atomic.Bool, done chan struct{})
	}{
		{"await", func(ran *atomic.Bool, done chan struct{}) {
			var once sync.Once
			b.await(func() {
				ran.Store(true)
				once.Do(func() { close(done) })
			})
		}},
		{"wait", func(ran *atomic.Bool, done chan struct{}) {
			go func() {
				b.wait()
				ran.Store(true)
				close(done)
			}()
		}},
	} {
		t.Run(how.name, func(t *testing.T) {
			for range 5 {
				var ran atomic.Bool
				done := make(chan struct{})
				how.start(&ran, done)
				early := false
				for range 2000 {
					runtime.Gosched()
					if ran.Load() {
						early = true
						break
					}
				}
				<-done
				if !early {
					return
				}
			}
			t.Fatal("in 5 tries, the waiter went on each time while another goroutine still had work, before the network was polled")
		})
	}
	b.close()
	if b.wait() {
		t.Error("wait on a closed barrier reported that it waited")
	}
}

// TestNetBarrierLetsThePollsReadersRunFirst: the function of an await
// runs after the goroutines that the same network poll made runnable,
// so that a request read by that poll is queued before a round is chosen.
// On one processor kept busy, a pipe that stands for a caller's
// connection gets its bytes before the barrier's byte is written; the
// poller then hands back both readers, the barrier's first, and the
// function must see the connection read. The runtime's own poll (every
// 10 ms from its monitor) can wake the two apart now and then, so the
// test asks it of most tries, not all: without the barrier's yield, nine
// tries in ten saw the function first; with it, about one in seventy.
func TestNetBarrierLetsThePollsReadersRunFirst(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var b netBarrier
	defer b.close()
	const tries = 7
	first := 0
	for range tries {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var read atomic.Bool
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			buf := make([]byte, 1)
			if _, err := r.Read(buf); err == nil {
				read.Store(true)
			}
		}()
		for range 10 {
			runtime.Gosched() // the reader parks in the poller
		}
		if _, err := w.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		sawRead := make(chan bool, 1)
		b.await(func() {
			select {
			case sawRead <- read.Load():
			default:
			}
		})
		for range 10 {
			runtime.Gosched() // the barrier's byte is written, no poll yet
		}
		if !<-sawRead { // blocks: the processor polls
			first++
		}
		<-readerDone
		r.Close()
		w.Close()
	}
	if first > tries/2 {
		t.Errorf("in %d of %d tries the barrier's function ran before the reader of a pipe the same poll found ready", first, tries)
	}
}
