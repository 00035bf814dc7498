package aggregator

import (
	"container/heap"
	"time"
)

// timers orders the calls of the table by when each is next due: its
// deadline, or sooner the end of its ack timeout, of its worker's
// silence, of its backoff or of its hedge delay ([call.next]). One
// time.Timer, re-armed to the first of them, serves them all. A call is
// in it at most once; its index is kept in the call. Not safe for
// concurrent use: the table's lock guards it.
type timers []*call

var _ heap.Interface = (*timers)(nil)

func (h timers) Len() int           { return len(h) }
func (h timers) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

// Push implements [heap.Interface]; use set.
func (h *timers) Push(x any) {
	cl := x.(*call)
	cl.index = len(*h)
	*h = append(*h, cl)
}

// Pop implements [heap.Interface]; use drop.
func (h *timers) Pop() any {
	old := *h
	n := len(old) - 1
	cl := old[n]
	old[n] = nil
	cl.index = -1
	*h = old[:n]
	return cl
}

// set makes cl due at due, in the heap or not yet.
func (h *timers) set(cl *call, due time.Time) {
	cl.due = due
	if cl.index < 0 {
		heap.Push(h, cl)
		return
	}
	heap.Fix(h, cl.index)
}

// drop takes cl out, when it is in.
func (h *timers) drop(cl *call) {
	if cl.index >= 0 {
		heap.Remove(h, cl.index)
	}
}

// first returns the call due first, or nil.
func (h timers) first() *call {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}
