package aggregator_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/schema"
)

// TestAccessLog checks that the per-call "call" line is written at level
// Info only with the access log on, and at level Debug otherwise.
func TestAccessLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		level  slog.Level
		access bool
		want   int
	}{
		{"default, info", slog.LevelInfo, false, 0},
		{"default, debug", slog.LevelDebug, false, 1},
		{"access log, info", slog.LevelInfo, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ac, wc := setup(t)
			serve(t, wc, "echo", echo)
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			a := newAgg(t, ac, aggregator.WithLogger(log), aggregator.WithAccessLog(tc.access))
			got := schema.Collect(context.Background(), a, []schema.Call{call(`1`, "echo", `{}`)})
			if len(got) != 1 || got[0].Error != nil {
				t.Fatalf("Dispatch = %+v, want one result", got)
			}
			if n := strings.Count(buf.String(), `"msg":"call"`); n != tc.want {
				t.Errorf("call lines = %d, want %d:\n%s", n, tc.want, buf.String())
			}
		})
	}
}
