package worker

import "testing"

func TestRunOfUnheardMessages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unheard []uint64 // numbers of the messages that found nobody, in order
		want    uint64   // the length of the run the last one ends
	}{
		{"the first", []uint64{1}, 1},
		{"one later", []uint64{5}, 1},
		{"three in a row", []uint64{4, 5, 6}, 3},
		{"one heard in between", []uint64{4, 5, 7}, 1},
		{"a run after a gap", []uint64{1, 2, 4, 5, 6, 7}, 4},
		{"the same twice", []uint64{3, 3}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r run
			var got uint64
			for _, seq := range tc.unheard {
				got = r.unheard(seq)
			}
			if got != tc.want {
				t.Errorf("run after unheard %v = %d, want %d", tc.unheard, got, tc.want)
			}
		})
	}
}
