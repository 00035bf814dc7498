package ingress

import (
	"sync"
	"testing"
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

// TestNetBarrierReaderEnds checks that the reader ends once no wait comes
// (a server used only as a handler, never shut down, keeps no goroutine),
// and that the next wait starts another.
func TestNetBarrierReaderEnds(t *testing.T) {
	var b netBarrier
	defer b.close()
	for range 2 {
		ran := make(chan struct{})
		b.await(func() { close(ran) })
		<-ran
		b.readers.Wait() // returns once the reader has ended for want of waits
		b.mu.Lock()
		reading := b.reading
		b.mu.Unlock()
		if reading {
			t.Fatal("the reader ended but still counts as reading")
		}
	}
}
