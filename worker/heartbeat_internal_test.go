package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

func TestAckDelayFollowsTheAggregator(t *testing.T) {
	for _, tc := range []struct {
		name, heartbeat, header string
		want                    time.Duration
	}{
		{"absent", "1000", "", 0},
		{"the aggregator's", "1000", "20", 20 * time.Millisecond},
		{"zero", "1000", "0", 0},
		{"negative", "1000", "-20", 0},
		{"not a number", "1000", "20ms", 0},
		{"as long as the interval", "1000", "1000", time.Second},
		{"longer than the interval", "1000", "5000", time.Second},
		// The interval is brought up to the shortest a worker keeps,
		// and the delay follows it.
		{"longer than an interval brought up to the shortest", "1", "50", minHeartbeat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Reply: "_INBOX.x", Header: nats.Header{}}
			msg.Header.Set(schema.HeaderHeartbeat, tc.heartbeat)
			if tc.header != "" {
				msg.Header.Set(schema.HeaderAckDelay, tc.header)
			}
			if got := (&Runtime{}).heartbeat(msg).ackDelay; got != tc.want {
				t.Errorf("ack delay of %s %q with %s %q = %v, want %v",
					schema.HeaderAckDelay, tc.header, schema.HeaderHeartbeat, tc.heartbeat, got, tc.want)
			}
		})
	}
}
