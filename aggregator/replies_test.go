package aggregator_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// replySubjects returns the reply subjects of n calls of "rogue" that
// the aggregator a sends, as a worker serving "rogue" sees them.
func replySubjects(t *testing.T, a *aggregator.Aggregator, wc *nats.Conn, n int) []string {
	t.Helper()
	seen := make(chan string, n)
	sub, err := wc.QueueSubscribe("toolbus.call.rogue", "toolbus-workers", func(m *nats.Msg) {
		seen <- m.Reply
		reply(m, schema.ReplyResult([]byte(`"own"`)), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, n)
	for i := range n {
		if r := dispatchOne(a, call(fmt.Sprint(i), "rogue", `{}`)); r.Error != nil {
			t.Fatalf("rogue call %d = %+v, want its own answer", i, r.Error)
		}
		out = append(out, <-seen)
	}
	return out
}

// checkToken fails t unless tok is a reply token: 22 characters of
// base64url for 16 bytes.
func checkToken(t *testing.T, subject, tok string) {
	t.Helper()
	if b, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(tok) != bus.ReplyTokenLen || len(b) != bus.ReplyTokenBytes {
		t.Fatalf("reply subject %q: token %q is not %d bytes of base64url", subject, tok, bus.ReplyTokenBytes)
	}
}

// checkIndependent fails t when two of toks begin alike: random tokens of
// 128 bits do not, while tokens that count up (a NUID's) share their first
// twelve characters.
func checkIndependent(t *testing.T, what string, toks []string) {
	t.Helper()
	seen := map[string]string{}
	for _, tok := range toks {
		half := tok[:bus.ReplyTokenLen/2]
		if other, ok := seen[half]; ok {
			t.Fatalf("%s %q and %q begin alike: the tokens are not independent", what, other, tok)
		}
		seen[half] = tok
	}
}

// A job's reply subject, which workers may publish on, can be learned
// only from the call: its runner's part and its call's part are each 128
// random bits, unrelated to those of other calls and runners. A worker
// that watched its own calls and publishes on guessed subjects answers
// no other call: what it sends is dropped and counted, apart from a late
// answer of its own call.
func TestForgedJobRepliesDropped(t *testing.T) {
	ac, wc := setup(t)
	const prefix = "toolbus.jobs.reply"
	a := newAgg(t, ac, aggregator.WithReplyPrefix(prefix))
	b := newAgg(t, ac, aggregator.WithReplyPrefix(prefix))

	subjects := replySubjects(t, a, wc, 20)
	var runners, calls []string
	for _, s := range append(subjects, replySubjects(t, b, wc, 1)...) {
		tokens := strings.Split(strings.TrimPrefix(s, prefix+"."), ".")
		if !strings.HasPrefix(s, prefix+".") || len(tokens) != 2 {
			t.Fatalf("reply subject %q, want %s.<runner>.<call>", s, prefix)
		}
		checkToken(t, s, tokens[0])
		checkToken(t, s, tokens[1])
		if len(runners) == 0 || runners[len(runners)-1] != tokens[0] {
			runners = append(runners, tokens[0])
		}
		calls = append(calls, tokens[1])
	}
	if len(runners) != 2 {
		t.Fatalf("runner tokens %q, want one for each aggregator", runners)
	}
	checkIndependent(t, "runner tokens", runners)
	checkIndependent(t, "call tokens", calls)

	// The victim's call waits on a worker that holds it.
	held := make(chan *nats.Msg, 1)
	sub, err := wc.QueueSubscribe("toolbus.call.victim", "toolbus-workers", func(m *nats.Msg) { held <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	victim := make(chan schema.Response, 1)
	go func() { victim <- dispatchOne(a, call("v", "victim", `{}`)) }()
	genuine := <-held

	// The rogue answers under the runner's part it saw: random guesses,
	// guesses near its own calls' tokens, and its own call once more.
	runner := subjects[0][:strings.LastIndexByte(subjects[0], '.')+1]
	last := calls[len(calls)-2] // a's last call
	var forged []string
	for i := range 40 {
		forged = append(forged, runner+bus.ReplyToken(), runner+last[:bus.ReplyTokenLen-2]+fmt.Sprintf("%02d", i))
	}
	publish := func(subject, result string) {
		data, err := schema.MarshalReply(schema.ReplyResult([]byte(result)))
		if err != nil {
			t.Fatal(err)
		}
		if err := wc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range forged {
		publish(s, `"forged"`)
	}
	publish(subjects[len(subjects)-1], `"late"`)
	want := aggregator.Strays{Late: 1, Unmatched: uint64(len(forged))}
	testwait.Eventually(t, func() bool { return a.Strays() == want }, fmt.Sprintf("the aggregator counts %+v", want))

	reply(genuine, schema.ReplyResult([]byte(`"genuine"`)), nil)
	if r := <-victim; r.Error != nil || string(r.Result) != `"genuine"` {
		t.Fatalf("victim's call = %s, %v; want the genuine answer", r.Result, r.Error)
	}
	if got := a.Strays(); got != want {
		t.Errorf("Strays() = %+v, want %+v", got, want)
	}
	if got := b.Strays(); got != (aggregator.Strays{}) {
		t.Errorf("the other aggregator's Strays() = %+v, want none", got)
	}
	exp := fmt.Sprintf(`
# HELP toolbus_aggregator_stray_replies_total Messages dropped because they reached the aggregator's reply subjects when no call waited there: kind "late" went to a call that had just ended (an answer after a deadline or cancel, a retry's second answer); kind "unmatched" to a subject of no call the aggregator remembers, a forgery or a very late answer.
# TYPE toolbus_aggregator_stray_replies_total counter
toolbus_aggregator_stray_replies_total{kind="late",reply_prefix="toolbus.jobs.reply"} 1
toolbus_aggregator_stray_replies_total{kind="unmatched",reply_prefix="toolbus.jobs.reply"} %d
`, len(forged))
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(exp), "toolbus_aggregator_stray_replies_total"); err != nil {
		t.Error(err)
	}
}

// The reply subjects of an ingress's calls are under the connection's
// inbox prefix, with the same random parts.
func TestInboxReplySubjectsRandom(t *testing.T) {
	ac, wc := setup(t)
	a := newAgg(t, ac)
	subjects := replySubjects(t, a, wc, 20)
	var calls []string
	for _, s := range subjects {
		tokens := strings.Split(s, ".")
		if len(tokens) != 3 || tokens[0] != "_INBOX" {
			t.Fatalf("reply subject %q, want _INBOX.<aggregator>.<call>", s)
		}
		checkToken(t, s, tokens[1])
		checkToken(t, s, tokens[2])
		calls = append(calls, tokens[2])
	}
	checkIndependent(t, "call tokens", calls)
}
