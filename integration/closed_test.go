//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// attacker is a client of the cluster's NATS that tries what it must not:
// without a user, or with a worker's credential. Each attempt is made on a
// connection of its own, so that the server's answer to it is told apart.
type attacker struct {
	name string
	url  string
	opts []bus.Option // its credential, if any
}

// attemptOutcome is what the server did with one attempt.
type attemptOutcome struct {
	refused bool
	how     string
}

// try makes one attempt: it connects, runs do, and waits for the server
// to refuse it, which it does either at connect (no user) or with a
// permissions violation. An attempt the server does not refuse within 5s
// succeeded. The connection stays open until the test ends, with whatever
// subscription do made.
func (a attacker) try(t *testing.T, do func(ctx context.Context, nc *nats.Conn) error) attemptOutcome {
	t.Helper()
	violations := make(chan error, 16)
	opts := append([]bus.Option{bus.WithName("attacker-" + a.name),
		bus.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case violations <- err:
				default:
				}
			}
		}))}, a.opts...)
	nc, err := bus.Connect(a.url, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) {
			return attemptOutcome{true, "connection refused: " + rootErr(err)}
		}
		t.Fatalf("%s: connect: %v", a.name, err)
	}
	t.Cleanup(nc.Close)
	// A refused request is never answered: do ends with ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doErr := do(ctx, nc)
	_ = nc.Flush()
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case v := <-violations:
		return attemptOutcome{true, rootErr(v)}
	case <-wait.C:
		return attemptOutcome{false, fmt.Sprintf("no refusal within 5s (the attempt returned %v)", doErr)}
	}
}

func rootErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.Contains(s[i:], "Violation") {
		return s[i+2:]
	}
	return s
}

// TestBusClosed tries, against the shipped secured configuration, what a
// process that reaches NATS must not be able to do, with no credential and
// with a worker's: take calls outside the workers' queue group, read or
// write on the reply subjects, answer a call it did not receive, forge the
// answer to a question another worker's tool asked, read the idempotency
// bucket, and write a job record. It prints the tally of attempts and
// refusals; every attempt must be refused by the server, and the
// cluster's own calls, jobs and idempotent answers are untouched. One
// thing the server lets every worker do: hear the answers to questions
// under the workers' inbox prefix. There the seal is the defence (rule 11
// of PROTOCOL.md), so the test listens as another worker, and the answer
// it hears must be sealed, open with no key but the call's, and still be
// taken by the worker that asked.
func TestBusClosed(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	natsURL := c.NATSURL(ctx, 0)
	ingress := c.URL(0)

	// What there is to steal or forge: an idempotent call's stored answer
	// and a finished job's record.
	const idemKey = "closed-bus-1"
	if status, body := postRPC(t, ingress, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"paid":42}}`, "Idempotency-Key", idemKey); status != http.StatusOK || !strings.Contains(body, `"paid":42`) {
		t.Fatalf("idempotent echo = %d %s, want its params back", status, body)
	}
	jobID, err := SubmitJob(ctx, ingress, "echo", map[string]any{"job": "real"})
	if err != nil {
		t.Fatalf("submit a job: %v", err)
	}
	// Whatever the job's end (it is the record that is at stake), it must
	// be the same after the attempts.
	job := c.WaitJobs([]string{jobID}, time.Minute)[jobID]
	if job == nil || !job.Final() {
		t.Fatalf("job %s = %+v, want it finished", jobID, job)
	}

	// The test itself calls the workers as an ingress does, with the
	// ingress's credential, so that an attacker knows the reply subject
	// of a call it did not receive.
	ingressNC, err := bus.Connect(natsURL, bus.WithName("test-ingress"),
		bus.WithUserPassword("ingress", c.Credentials.Password("ingress")))
	if err != nil {
		t.Fatalf("connect as the ingress: %v", err)
	}
	defer ingressNC.Close()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	callSubject, err := subjects.Call("sleep")
	if err != nil {
		t.Fatal(err)
	}

	// A question of the demo's confirm, whose answer a worker of the same
	// credential listens for, as it may, from before it is sent.
	q := askConfirm(t, ingressNC, subjects)
	eavesdropper, err := bus.Connect(natsURL, bus.WithName("eavesdropper"),
		bus.WithUserPassword("worker", c.Credentials.Password("worker")), bus.WithInboxPrefix(bus.WorkerInboxPrefix))
	if err != nil {
		t.Fatalf("connect as a worker: %v", err)
	}
	defer eavesdropper.Close()
	heard, err := eavesdropper.SubscribeSync(bus.WorkerInboxPrefix + ".ask.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := eavesdropper.Flush(); err != nil {
		t.Fatal(err)
	}
	forgedAnswer, err := schema.SealAnswer(schema.NewAskKey(), q.subject,
		schema.Answer{ID: q.id, Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":false}`)})
	if err != nil {
		t.Fatal(err)
	}

	// Subscriptions an attacker tries to keep: checked at the end for
	// anything they received.
	var spies []*nats.Subscription
	subscribe := func(subject, queue string) func(context.Context, *nats.Conn) error {
		return func(_ context.Context, nc *nats.Conn) error {
			sub, err := nc.QueueSubscribeSync(subject, queue)
			if err == nil {
				spies = append(spies, sub)
			}
			return err
		}
	}
	publish := func(subject string, data []byte) func(context.Context, *nats.Conn) error {
		return func(_ context.Context, nc *nats.Conn) error { return nc.Publish(subject, data) }
	}
	// answerForeign forges the answer to a call a worker holds: the test,
	// as the ingress, sends a call whose reply subject the attacker is
	// told, and listens for what comes back.
	var realAnswers []*nats.Subscription
	answerForeign := func(_ context.Context, nc *nats.Conn) error {
		reply := "_INBOX." + nuid.Next()
		answers, err := ingressNC.SubscribeSync(reply)
		if err != nil {
			return err
		}
		realAnswers = append(realAnswers, answers)
		env := &schema.CallEnvelope{Version: schema.EnvelopeVersion, ID: []byte(`"closed"`), Method: "sleep", Params: []byte(`{"ms":1000}`)}
		msg, err := bus.CallMsg(callSubject, env, time.Now().Add(10*time.Second), "")
		if err != nil {
			return err
		}
		msg.Reply = reply
		if err := ingressNC.PublishMsg(msg); err != nil {
			return err
		}
		forged, err := schema.MarshalReply(schema.ReplyResult([]byte(`{"slept_ms":0,"forged":true}`)))
		if err != nil {
			return err
		}
		return nc.Publish(reply, forged)
	}
	readIdempotency := func(ctx context.Context, nc *nats.Conn) error {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.KeyValue(ctx, "toolbus_idem")
		return err
	}
	readIdempotencyRecord := func(ctx context.Context, nc *nats.Conn) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_toolbus_idem.$KV.toolbus_idem."+idemKey, nil)
		return err
	}
	forgedRecord, _ := json.Marshal(map[string]any{"id": jobID, "method": "echo", "state": "succeeded", "result": "forged"})

	type attempt struct {
		what string
		do   func(context.Context, *nats.Conn) error
	}
	writeRecord := attempt{"write a job record (forge a result)", publish("$KV.toolbus_jobs.job."+jobID, forgedRecord)}
	common := []attempt{
		{"subscribe to toolbus.call.> outside the queue group", subscribe("toolbus.call.>", "")},
		{"subscribe to toolbus.call.> in a queue group of its own", subscribe("toolbus.call.>", "eavesdroppers")},
		{"subscribe to every worker's direct calls (toolbus.direct.>) outside the queue group", subscribe("toolbus.direct.>", "")},
		{"subscribe to _INBOX.> (every caller's answers)", subscribe("_INBOX.>", "")},
		{"publish on _INBOX.>", publish("_INBOX."+nuid.Next(), []byte(`{}`))},
		{"answer a call it did not receive", answerForeign},
		{"forge the answer to another worker's question", publish(q.subject, forgedAnswer)},
		{"read the idempotency bucket", readIdempotency},
		{"read an idempotency record", readIdempotencyRecord},
	}
	attackers := []struct {
		a        attacker
		attempts []attempt
	}{
		{attacker{name: "anonymous", url: natsURL}, append(common, writeRecord)},
		{attacker{name: "worker-credential", url: natsURL, opts: []bus.Option{
			bus.WithUserPassword("worker", c.Credentials.Password("worker")), bus.WithInboxPrefix(bus.WorkerInboxPrefix),
		}}, append(common, writeRecord,
			attempt{"subscribe to toolbus.jobs.reply.> (the answers of jobs)", subscribe("toolbus.jobs.reply.>", "")})},
	}
	var tried, refused int
	var report strings.Builder
	for _, at := range attackers {
		for _, a := range at.attempts {
			out := at.a.try(t, a.do)
			tried++
			verdict := "SUCCEEDED"
			if out.refused {
				refused++
				verdict = "refused"
			} else {
				t.Errorf("%s: %s: the server did not refuse it: %s", at.a.name, a.what, out.how)
			}
			fmt.Fprintf(&report, "  %-18s %-56s %s (%s)\n", at.a.name, a.what, verdict, out.how)
		}
	}
	// The question's real answer: the eavesdropping worker hears it, as
	// the server lets it, and must find it sealed; the worker that asked
	// must take it, the forgery having been refused.
	sealed := 0
	plain := q.publishAnswer(t, ingressNC)
	for {
		m, err := heard.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("the eavesdropping worker heard no answer on %s: %v", q.subject, err)
		}
		if m.Subject != q.subject {
			continue
		}
		tried++
		verdict, how := "sealed", fmt.Sprintf("heard %d bytes that open only with the call's key", len(m.Data))
		_, otherKey := schema.OpenAnswer(schema.NewAskKey(), q.subject, m.Data)
		_, callKey := schema.OpenAnswer(q.key, q.subject, m.Data)
		switch {
		case bytes.Contains(m.Data, plain) || bytes.Contains(m.Data, []byte(`"confirmed"`)):
			verdict, how = "READ", fmt.Sprintf("heard %q", m.Data)
		case !errors.Is(otherKey, schema.ErrBadAnswer) || callKey != nil:
			verdict, how = "READ", fmt.Sprintf("another key opens it (%v) or the call's does not (%v)", otherKey, callKey)
		default:
			sealed++
		}
		if verdict != "sealed" {
			t.Errorf("worker-credential: read the answer to another worker's question: %s", how)
		}
		fmt.Fprintf(&report, "  %-18s %-56s %s (%s)\n", "worker-credential", "read the answer to another worker's question", verdict, how)
		break
	}
	q.confirmed(t)
	t.Logf("closed bus: %d attempts, %d refused by the server, %d kept unreadable by its seal, %d succeeded\n%s",
		tried, refused, sealed, tried-refused-sealed, report.String())

	// The calls that were sent meanwhile got their real answers, and the
	// attackers' subscriptions, had any been accepted, heard nothing.
	for _, answers := range realAnswers {
		m, err := answers.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("the real answer of a call whose answer was forged: %v", err)
		}
		r, err := bus.ReadReply(m)
		if err != nil || r.Error != nil || string(r.Result) != `{"slept_ms":1000}` {
			t.Errorf("the ingress heard %s (%v), want the worker's real answer", m.Data, err)
		}
	}
	if status, body := postRPC(t, ingress, `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"after":true}}`); status != http.StatusOK || !strings.Contains(body, `"after":true`) {
		t.Errorf("echo after the attempts = %d %s", status, body)
	}
	for _, sub := range spies {
		if n, _, _ := sub.Pending(); n > 0 {
			t.Errorf("an attacker's subscription to %s received %d messages", sub.Subject, n)
		}
	}
	// The stored answer and the job record are the real ones.
	if status, body := postRPC(t, ingress, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"paid":42}}`, "Idempotency-Key", idemKey); status != http.StatusOK || !strings.Contains(body, `"paid":42`) {
		t.Errorf("the idempotent echo again = %d %s, want the stored answer", status, body)
	}
	if rec, err := GetJob(ctx, ingress, jobID); err != nil || rec.State != job.State || string(rec.Result) != string(job.Result) {
		t.Errorf("job %s after the attempts = %+v, %v; want it as it ended, %+v", jobID, rec, err, job)
	}
}

// question is a question the demo's confirm asked in a call the test
// sent as a job's runner sends one, with the key that seals its answer.
type question struct {
	key     schema.AskKey
	id      string
	subject string // the answer subject the worker named
	replies *nats.Subscription
}

// askConfirm calls confirm through nc, which holds the ingress's
// credential, as a job's runner does (with heartbeats and a fresh
// Toolbus-Ask-Key), and returns the question it asks.
func askConfirm(t *testing.T, nc *nats.Conn, subjects bus.Subjects) question {
	t.Helper()
	reply := subjects.JobReplies() + "." + bus.ReplyToken() + "." + bus.ReplyToken()
	replies, err := nc.SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replies.Unsubscribe() })
	subject, err := subjects.Call("confirm")
	if err != nil {
		t.Fatal(err)
	}
	env := &schema.CallEnvelope{Version: schema.EnvelopeVersion, ID: []byte(`"closed-ask"`), Method: "confirm", Params: []byte(`{"action":"closed-bus"}`)}
	msg, err := bus.CallMsg(subject, env, time.Now().Add(3*time.Minute), "")
	if err != nil {
		t.Fatal(err)
	}
	q := question{key: schema.NewAskKey(), replies: replies}
	msg.Reply = reply
	msg.Header.Set(schema.HeaderHeartbeat, "1000")
	msg.Header.Set(schema.HeaderCallID, bus.ReplyToken())
	msg.Header.Set(schema.HeaderAskKey, q.key.String())
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := replies.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("confirm's question: %v", err)
		}
		switch m.Header.Get(schema.HeaderProgress) {
		case schema.ProgressQuestion:
			asked, err := schema.UnmarshalQuestion(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			q.id, q.subject = asked.ID, m.Header.Get(schema.HeaderAskReply)
			if err := schema.CheckAnswerSubject(q.subject); err != nil || !strings.HasPrefix(q.subject, bus.WorkerInboxPrefix+".ask.") {
				t.Fatalf("answer subject %q (%v), want one under %s", q.subject, err, bus.WorkerInboxPrefix)
			}
			return q
		case "":
			t.Fatalf("confirm answered %q before it asked", m.Data)
		}
	}
}

// publishAnswer publishes the answer {"confirmed": true} to q through
// nc, sealed with the call's key, and returns the answer's plaintext.
func (q question) publishAnswer(t *testing.T, nc *nats.Conn) []byte {
	t.Helper()
	a := schema.Answer{ID: q.id, Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed":true}`)}
	plain, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := schema.SealAnswer(q.key, q.subject, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(q.subject, sealed); err != nil {
		t.Fatal(err)
	}
	return plain
}

// confirmed checks that confirm went on with the answer of
// [question.publishAnswer], within 30s: its reply, after any progress
// messages, is confirmed.
func (q question) confirmed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := q.replies.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("confirm's reply after its answer: %v", err)
		}
		if m.Header.Get(schema.HeaderProgress) != "" {
			continue
		}
		r, err := bus.ReadReply(m)
		if err != nil {
			t.Fatal(err)
		}
		if r.Error != nil || string(r.Result) != `{"action":"closed-bus","confirmed":true}` {
			t.Errorf("confirm = %s %v, want it confirmed by the sealed answer, not by a forgery", r.Result, r.Err())
		}
		return
	}
}

// postRPC posts body to the ingress at base with header pairs and returns
// the status and body.
func postRPC(t *testing.T, base, body string, header ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rpc", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/rpc: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}
