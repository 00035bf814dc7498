package latest

import (
	"sync"
	"testing"
)

func TestOfferReplacesTheUnread(t *testing.T) {
	ch := make(chan int, 1)
	Offer(ch, 1)
	Offer(ch, 2)
	if got := <-ch; got != 2 {
		t.Fatalf("read %d, want the newest, 2", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("a second value %d, want none", v)
	default:
	}
}

func TestOfferNeverBlocksConcurrentWriters(t *testing.T) {
	ch := make(chan int, 1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 1000 {
				Offer(ch, i*1000+j)
			}
		}()
	}
	wg.Wait()
	if len(ch) != 1 {
		t.Fatalf("%d values in the channel, want 1", len(ch))
	}
}
