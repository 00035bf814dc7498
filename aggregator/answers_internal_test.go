package aggregator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTimedOutSaysTheDeadlineToTheMillisecond: a deadline that spent a
// moment in the ingress's queue is said as a person would read it.
func TestTimedOutSaysTheDeadlineToTheMillisecond(t *testing.T) {
	e := timedOut("sleep", 999911119*time.Nanosecond, "")
	if !strings.HasSuffix(e.Message, "within 1s") {
		t.Errorf("timedOut message = %q, want it to end %q", e.Message, "within 1s")
	}
	var data struct {
		TimeoutMS int64 `json:"timeout_ms"`
	}
	if err := json.Unmarshal(e.Data, &data); err != nil || data.TimeoutMS != 1000 {
		t.Errorf("timedOut data = %s, want timeout_ms 1000", e.Data)
	}
}
