package fair

import (
	"testing"
	"time"
)

// BenchmarkAlone is one caller's call at a time through the scheduler:
// queued, admitted at once, and done, as for a caller alone on an ingress.
func BenchmarkAlone(b *testing.B) {
	s, err := New[int](Config{})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(0, 0)
	e := &Entry[int]{Cost: 1}
	es := []*Entry[int]{e}
	b.ReportAllocs()
	for b.Loop() {
		*e = Entry[int]{Cost: 1}
		n, m := s.Enqueue(now, Flow{Name: "alice"}, es)
		if n != 1 || len(m.Admitted) != 1 {
			b.Fatalf("enqueued %d, admitted %d", n, len(m.Admitted))
		}
		s.Done(now, e)
		now = now.Add(time.Microsecond)
	}
}
