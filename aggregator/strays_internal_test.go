package aggregator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// records is a slog handler that keeps every record it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// lines returns the records kept, and forgets them.
func (r *records) lines() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

// attr returns the value of the attribute key of rec, or nil.
func attr(rec slog.Record, key string) any {
	var v any
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.Any()
			return false
		}
		return true
	})
	return v
}

// clock is a time a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }
func testSubjects(t *testing.T) bus.Subjects {
	t.Helper()
	s, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// replyMsg is a reply to subject with result r and the headers h.
func replyMsg(t *testing.T, subject string, h nats.Header) *nats.Msg {
	t.Helper()
	data, err := schema.MarshalReply(schema.ReplyResult([]byte(`"forged"`)))
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: subject, Data: data, Header: h}
}

// A message to a reply subject that no call has, however many, is
// dropped and counted, and the log says so at most once a minute, with
// how many came since its last line.
func TestStrayRepliesCountedAndLoggedOncePerInterval(t *testing.T) {
	h := newHarness(t, testPolicy)
	in, rec, clk := h.tb, h.rec, h.clk
	p := h.start("victim")
	forge := func(n int) {
		for range n {
			in.deliver(replyMsg(t, in.prefix+bus.ReplyToken(), nil))
		}
	}

	forge(5)
	lines := rec.lines()
	if len(lines) != 1 || attr(lines[0], "count") != uint64(1) || lines[0].Level != slog.LevelWarn {
		t.Fatalf("after 5 forged replies: %d lines (%v), want one warning counting the first", len(lines), lines)
	}
	if v := attr(lines[0], "reply_prefix"); v != "toolbus.jobs.reply" {
		t.Errorf("reply_prefix = %v, want toolbus.jobs.reply", v)
	}
	clk.advance(30 * time.Second)
	forge(3)
	if lines := rec.lines(); len(lines) != 0 {
		t.Fatalf("30s later, 3 more: %d lines, want none within the minute", len(lines))
	}
	clk.advance(31 * time.Second)
	forge(1)
	lines = rec.lines()
	if len(lines) != 1 || attr(lines[0], "count") != uint64(8) || attr(lines[0], "since_last") != 61*time.Second {
		t.Fatalf("61s after the first line, one more: lines %v, want one counting the 8 since it, 61s later", lines)
	}
	if got := (Strays{Late: in.late.Load(), Unmatched: in.unmatched.Load()}); got != (Strays{Unmatched: 9}) {
		t.Errorf("strays = %+v, want 9 unmatched", got)
	}
	h.open(p)
}

// A message to the reply subject of a call that has just ended is late,
// not forged: counted apart, and not logged.
func TestLateReplyCountedApart(t *testing.T) {
	h := newHarness(t, testPolicy)
	in, rec := h.tb, h.rec
	cl := h.start("echo")
	subject := h.subject(cl)
	h.reply(cl, `"ok"`)
	h.answer(cl)
	in.deliver(replyMsg(t, subject, nil))
	in.deliver(&nats.Msg{Subject: subject, Header: nats.Header{schema.HeaderProgress: []string{"1"}}})
	if got := (Strays{Late: in.late.Load(), Unmatched: in.unmatched.Load()}); got != (Strays{Late: 2}) {
		t.Errorf("strays = %+v, want 2 late", got)
	}
	if lines := rec.lines(); len(lines) != 0 {
		t.Errorf("late replies logged %d lines, want none", len(lines))
	}
}

// The tokens of ended calls are remembered in two generations: the
// latest EndedRemembered always, never more than twice as many.
func TestEndedTokensBounded(t *testing.T) {
	var e endedTokens
	const n = 3 * EndedRemembered
	for i := range n {
		e.add(fmt.Sprint(i))
	}
	if size := len(e.cur) + len(e.old); size > 2*EndedRemembered {
		t.Fatalf("remembers %d tokens, want at most %d", size, 2*EndedRemembered)
	}
	for _, tc := range []struct {
		name string
		i    int
		want bool
	}{
		{"the last", n - 1, true},
		{"the oldest of the latest generation", n - EndedRemembered, true},
		{"the first", 0, false},
		{"two generations back", n - 2*EndedRemembered - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.has(fmt.Sprint(tc.i)); got != tc.want {
				t.Errorf("has(%d) = %v, want %v", tc.i, got, tc.want)
			}
		})
	}
}

// BenchmarkTableStartReply measures what the table costs a call: its
// reply token, its entry and timer, its reply, and remembering it ended.
func BenchmarkTableStartReply(b *testing.B) {
	s, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		b.Fatal(err)
	}
	tb := newTable("_INBOX", s, testPolicy, discardWire{}, slog.New(slog.NewTextHandler(io.Discard, nil)), func(*call) {})
	reply, err := schema.MarshalReply(schema.ReplyResult([]byte(`1`)))
	if err != nil {
		b.Fatal(err)
	}
	bt := &batch{ctx: context.Background(), start: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		cl := &call{c: &schema.Call{}, b: bt, method: "echo", timeout: time.Second, deadline: momentOf(time.Now().Add(time.Second)), index: -1}
		tb.start(cl, "toolbus.call.echo", nil)
		tb.deliver(&nats.Msg{Subject: tb.prefix + cl.token, Data: reply})
	}
}

// discardWire is a [wire] that sends nothing.
type discardWire struct{}

func (discardWire) publish(*nats.Msg, string) *schema.Error { return nil }
func (discardWire) cancel(string)                           {}
