package worker

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

func TestMissStreak(t *testing.T) {
	for _, tc := range []struct {
		name   string
		missed []uint64 // numbers of the messages that found nobody, in order
		want   uint64   // the length of the run the last one ends
	}{
		{"the first", []uint64{1}, 1},
		{"one later", []uint64{5}, 1},
		{"three in a row", []uint64{4, 5, 6}, 3},
		{"one heard in between", []uint64{4, 5, 7}, 1},
		{"a run after a gap", []uint64{1, 2, 4, 5, 6, 7}, 4},
		{"the same twice", []uint64{3, 3}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r missStreak
			var got uint64
			for _, seq := range tc.missed {
				got = r.missed(seq)
			}
			if got != tc.want {
				t.Errorf("missed(%v) in turn = %d, want %d", tc.missed, got, tc.want)
			}
		})
	}
}

func TestMissesFollowTheAggregator(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		want         uint64
	}{
		{"absent", "", defaultMisses},
		{"the aggregator's", "5", 5},
		{"one", "1", 1},
		{"zero", "0", defaultMisses},
		{"negative", "-2", defaultMisses},
		{"not a number", "three", defaultMisses},
		{"too many", "100000", maxMisses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Reply: "_INBOX.x", Header: nats.Header{}}
			msg.Header.Set(schema.HeaderHeartbeat, "1000")
			if tc.header != "" {
				msg.Header.Set(schema.HeaderHeartbeatMisses, tc.header)
			}
			if got := (&Runtime{}).heartbeat(msg).misses; got != tc.want {
				t.Errorf("misses of %s %q = %d, want %d", schema.HeaderHeartbeatMisses, tc.header, got, tc.want)
			}
		})
	}
}
