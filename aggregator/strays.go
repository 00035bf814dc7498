package aggregator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Strays counts the messages that reached an aggregator's reply subjects
// when no call waited for them there. Each is dropped: it answers
// nothing, and claims no free slot.
type Strays struct {
	// Late went to the reply subject of a call among the last
	// [EndedRemembered] or more that ended: an answer after the call's
	// deadline or cancel, the second answer of a call published again
	// (a retry or a hedge), or a beat that crossed its reply. Routine.
	Late uint64
	// Unmatched went to a subject of no call the aggregator remembers:
	// a worker guessing reply subjects to forge another call's answer,
	// or a message of a call that ended before the calls it remembers.
	// The aggregator logs these, at most once per [StrayLogEvery].
	Unmatched uint64
}

// EndedRemembered is at least how many of the calls that ended last an
// aggregator remembers, so as to tell a late answer ([Strays.Late]) from
// one to a subject it never made ([Strays.Unmatched]). It remembers up to
// twice as many.
const EndedRemembered = 1 << 14

// StrayLogEvery is how often at most an aggregator logs the messages to
// its reply subjects that no call it remembers waits for: the first one at
// once, then, at the first one after this interval, how many came since
// the previous line.
const StrayLogEvery = time.Minute

// Strays returns how many messages reached the aggregator's reply
// subjects for no waiting call since it was made.
func (a *Aggregator) Strays() Strays {
	return Strays{Late: a.table.late.Load(), Unmatched: a.table.unmatched.Load()}
}

// Collector returns the aggregator's Prometheus collector, of
//
//   - toolbus_aggregator_stray_replies_total{reply_prefix,kind}: the
//     messages of [Aggregator.Strays], kind "late" or "unmatched";
//   - toolbus_aggregator_questions_dropped_total{reply_prefix,reason}:
//     the questions of [Aggregator.QuestionsDropped], reason
//     "cannot_ask", "answer_subject" or "invalid";
//
// reply_prefix is the fixed beginning of the aggregator's reply subjects
// ("<prefix>.reply" for a gateway's calls, "<prefix>.jobs.reply" for its
// job runner's), so that the aggregators of one process can be registered on
// one registry.
//
// A growing "unmatched" count means someone publishes on the reply
// subjects without having been given them: a credential that may publish
// there is being misused. A growing count of dropped questions means a
// worker asks against rule 11. Every call returns a collector of the
// same counts.
func (a *Aggregator) Collector() prometheus.Collector {
	labels := prometheus.Labels{"reply_prefix": a.table.name}
	return &collector{a: a,
		strays: prometheus.NewDesc("toolbus_aggregator_stray_replies_total",
			`Messages dropped because they reached the aggregator's reply subjects when no call waited there: kind "late" went to a call that had just ended (an answer after a deadline or cancel, a retry's second answer); kind "unmatched" to a subject of no call the aggregator remembers, a forgery or a very late answer.`,
			[]string{"kind"}, labels),
		questions: prometheus.NewDesc("toolbus_aggregator_questions_dropped_total",
			`Questions of tools (rule 11 of PROTOCOL.md) dropped by the aggregator: reason "cannot_ask" came to a call whose caller cannot answer; "answer_subject" named a subject the aggregator may not publish on; "invalid" broke the rule otherwise and was answered cancel.`,
			[]string{"reason"}, labels)}
}

// collector is the collector of [Aggregator.Collector].
type collector struct {
	a                 *Aggregator
	strays, questions *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// Describe implements [prometheus.Collector].
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.strays
	ch <- c.questions
}

// Collect implements [prometheus.Collector].
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Strays()
	ch <- prometheus.MustNewConstMetric(c.strays, prometheus.CounterValue, float64(s.Late), "late")
	ch <- prometheus.MustNewConstMetric(c.strays, prometheus.CounterValue, float64(s.Unmatched), "unmatched")
	q := c.a.QuestionsDropped()
	ch <- prometheus.MustNewConstMetric(c.questions, prometheus.CounterValue, float64(q.CannotAsk), "cannot_ask")
	ch <- prometheus.MustNewConstMetric(c.questions, prometheus.CounterValue, float64(q.AnswerSubject), "answer_subject")
	ch <- prometheus.MustNewConstMetric(c.questions, prometheus.CounterValue, float64(q.Invalid), "invalid")
}

// strayLog writes the line about unmatched messages, at most one per
// every: a worker forging answers sends many, and one line per message
// would be a flood of its making.
type strayLog struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration
	// name is the fixed beginning of the reply subjects, for the line.
	name string

	mu     sync.Mutex
	logged time.Time // when the last line was written; zero before the first
	since  uint64    // unmatched messages not yet in a line
}

// note counts one unmatched message, and writes the line when the last
// was written at least every ago. The messages that come after a line and
// stop within every are in no line until the next one comes; the
// collector counts them all.
func (s *strayLog) note() {
	s.mu.Lock()
	s.since++
	now := s.now()
	if !s.logged.IsZero() && now.Sub(s.logged) < s.every {
		s.mu.Unlock()
		return
	}
	n, prev := s.since, s.logged
	s.since, s.logged = 0, now
	s.mu.Unlock()
	attrs := []slog.Attr{slog.String("reply_prefix", s.name), slog.Uint64("count", n)}
	if !prev.IsZero() {
		attrs = append(attrs, slog.Duration("since_last", now.Sub(prev)))
	}
	// A NATS callback has no context of its own.
	s.log.LogAttrs(context.Background(), slog.LevelWarn,
		"messages reached reply subjects of no call this aggregator remembers and were dropped: someone may be guessing reply subjects to forge answers, "+
			"or answers came long after their calls ended; if it recurs, find which NATS credential publishes under reply_prefix (the server's logs or subject tracing) and revoke its publish permission there",
		attrs...)
}

// newStrayLog returns the log of unmatched messages to the reply subjects
// beginning with name.
func newStrayLog(log *slog.Logger, name string) *strayLog {
	return &strayLog{log: log, now: time.Now, every: StrayLogEvery, name: name}
}

// stray counts a message that no call waits for: late when it went to
// a call that ended lately.
func (t *table) stray(late bool) {
	if late {
		t.late.Add(1)
		return
	}
	t.unmatched.Add(1)
	t.strays.note()
}

// strayCounters are the counts of [Aggregator.Strays], kept by the table.
type strayCounters struct {
	late, unmatched atomic.Uint64
}
