package bus

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestBackoff checks the pauses of the reconnect loop: from the first
// wait at the start of an episode, doubling at each step up to the bound
// of the cause, the longer one while credentials are refused, and never
// more than the step's wait.
func TestBackoff(t *testing.T) {
	unreachable := errors.New("dial tcp 127.0.0.1:4222: connect: connection refused")
	refused := fmt.Errorf("connect: %w", nats.ErrAuthorization)
	type step struct {
		cause error
		want  time.Duration // the step's wait before jitter
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"unreachable", []step{{nil, time.Second}, {unreachable, 2 * time.Second}, {unreachable, 4 * time.Second},
			{unreachable, 5 * time.Second}, {unreachable, 5 * time.Second}}},
		{"refused after an outage", []step{{nil, time.Second}, {unreachable, 2 * time.Second}, {unreachable, 4 * time.Second},
			{unreachable, 5 * time.Second}, {refused, 10 * time.Second}, {refused, 20 * time.Second},
			{refused, DefaultRefusedReconnectMaxWait}, {refused, DefaultRefusedReconnectMaxWait},
			{unreachable, 5 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &watch{wait1: time.Second, limit: 5 * time.Second}
			for i, s := range tt.steps {
				got := w.backoff(i+1, s.cause)
				if w.wait != s.want || got < s.want/2 || got > s.want {
					t.Errorf("step %d (%v): wait %v, pause %v, want wait %v and a pause between %v and %v",
						i+1, s.cause, w.wait, got, s.want, s.want/2, s.want)
				}
			}
			// A connection that is back starts again from the first wait.
			if w.backoff(1, nil); w.wait != time.Second {
				t.Errorf("first step of the next episode: wait %v, want %v", w.wait, time.Second)
			}
		})
	}
}
