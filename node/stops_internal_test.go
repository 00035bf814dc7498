package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// warnings is a log handler that keeps the warnings' messages and parts,
// and closes seen at the first that names the part slow.
type warnings struct {
	mu    sync.Mutex
	lines []string
	seen  chan struct{}
	once  sync.Once
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "part" {
			line += " part=" + a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
	if strings.Contains(line, "part=slow") {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}

// TestStopAllNamesASlowPart: the stops run last first, every error is
// returned, and a part that has not stopped after the warning's time is
// named in a warning, while the shutdown goes on waiting for it.
func TestStopAllNamesASlowPart(t *testing.T) {
	h := &warnings{seen: make(chan struct{})}
	log := slog.New(h)
	var order []string
	var l stops
	errFirst := errors.New("first failed")
	l.add("first", func(context.Context) error { order = append(order, "first"); return errFirst })
	l.add("slow", func(context.Context) error {
		<-h.seen // stops only once the warning about it was written
		order = append(order, "slow")
		return nil
	})
	l.add("last", func(context.Context) error { order = append(order, "last"); return nil })
	err := stopAllWarning(context.Background(), log, &l, time.Millisecond)
	if !errors.Is(err, errFirst) {
		t.Errorf("stopAll = %v, want the first part's error", err)
	}
	if got := strings.Join(order, ","); got != "last,slow,first" {
		t.Errorf("stopped %s, want last,slow,first", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// A quick part may be named too on a loaded machine, where 1 ms
	// passes easily; the slow one must be.
	named := false
	for _, line := range h.lines {
		named = named || strings.Contains(line, "still waiting") && strings.Contains(line, "part=slow")
	}
	if !named {
		t.Errorf("warnings %q, want one naming the part slow", h.lines)
	}
	if len(l) != 0 {
		t.Errorf("%d stops left after stopAll, want none", len(l))
	}
}
