package conform

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/schema"
)

// What conform.ask asks (PROTOCOL.md, section 12).
const (
	askMessage = "conform asks"
	askSchema  = `{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`
)

const askWant = `an ack, then a progress message "question" with Toolbus-Ask-Reply <inbox prefix>.ask.<token> ` +
	`and the body {"id": ..., "message": "conform asks", "schema": ` + askSchema + `}`

// forgery is a message the kit publishes on an answer subject before the
// real answer: none of them may be taken.
type forgery struct {
	what string
	// body returns the message's body for the question id on subject,
	// sealed (or not) as what says; key is the call's.
	body func(key schema.AskKey, subject, id string) ([]byte, error)
}

// forgeries are sent in this order; each answers a word of its own, so
// that the result tells which one the tool took.
var forgeries = map[string]forgery{
	"unsealed": {"an answer that is not sealed, plain JSON", func(_ schema.AskKey, _, id string) ([]byte, error) {
		return json.Marshal(schema.Answer{ID: id, Action: schema.AskAccept, Content: json.RawMessage(`{"word":"unsealed"}`)})
	}},
	"other key": {"an answer sealed with another key than the call's", func(_ schema.AskKey, subject, id string) ([]byte, error) {
		return schema.SealAnswer(schema.NewAskKey(), subject, schema.Answer{ID: id, Action: schema.AskAccept, Content: json.RawMessage(`{"word":"other key"}`)})
	}},
	"other subject": {"an answer sealed with the call's key for another answer subject", func(key schema.AskKey, subject, id string) ([]byte, error) {
		return schema.SealAnswer(key, subject+"x", schema.Answer{ID: id, Action: schema.AskAccept, Content: json.RawMessage(`{"word":"other subject"}`)})
	}},
	"other question": {"an answer sealed with the call's key naming another question", func(key schema.AskKey, subject, _ string) ([]byte, error) {
		return schema.SealAnswer(key, subject, schema.Answer{ID: "another-question", Action: schema.AskAccept, Content: json.RawMessage(`{"word":"other question"}`)})
	}},
}

// askers returns the methods the worker announces with "asks": true, or
// why it cannot tell.
func (s *session) askers() (map[string]bool, string) {
	mine, problem := s.announcements()
	if problem != "" {
		return nil, "its announcements break §9 (see rule announce), so the kit cannot tell whether it declares asks"
	}
	if len(echoes(mine)) == 0 {
		// Heard nothing yet; ask, and give it a moment.
		_ = s.nc.Publish(s.subjects.DiscoveryPing(), nil)
		time.Sleep(time.Second)
		mine, _ = s.announcements()
	}
	if len(echoes(mine)) == 0 {
		return nil, "the worker sent no announcement, so no tool of it declares \"asks\": questions (rule 11) are optional"
	}
	out := map[string]bool{}
	for _, x := range mine {
		if !x.Leaving && x.Tools[0].Asks {
			out[x.method] = true
		}
	}
	if len(out) == 0 {
		return nil, "no tool of the worker announces \"asks\": true: questions (rule 11) are optional"
	}
	return out, ""
}

func checkAsk(_ context.Context, s *session, r rule) Result {
	asking, why := s.askers()
	if asking == nil {
		return r.skip(why)
	}
	if !asking["conform.ask"] {
		names := make([]string, 0, len(asking))
		for m := range asking {
			names = append(names, m)
		}
		sort.Strings(names)
		return r.fail("nothing (the kit reads the worker's announcements)",
			`conform.ask announced with "asks": true: a worker that declares asks serves the asking tool of the conformance toolset`,
			fmt.Sprintf("asks declared on %s, not on conform.ask", strings.Join(names, ", ")))
	}
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if !live.acks {
		return r.fail("conform.sleep with Toolbus-Heartbeat", "an ack and heartbeats (rule 8), which asking needs", live.why)
	}

	// A question, forged answers, then the real one.
	key := schema.NewAskKey()
	c := call{method: "conform.ask", id: s.id(), heartbeat: heartbeat, callID: nuid.Next(), askKey: key.String(), deadline: time.Now().Add(30 * time.Second)}
	x, err := s.send(c)
	if err != nil {
		return r.fail(c.String(), askWant, err.Error())
	}
	defer x.close()
	q, subject, problem := x.question(answerWait)
	if problem != "" {
		return r.fail(c.String(), askWant, problem)
	}
	order := []string{"unsealed", "other key", "other subject", "other question"}
	for _, name := range order {
		body, err := forgeries[name].body(key, subject, q.ID)
		if err != nil {
			return r.fail("", "", err.Error())
		}
		if err := s.nc.Publish(subject, body); err != nil {
			return r.fail("", "", err.Error())
		}
	}
	sealed, err := schema.SealAnswer(key, subject, schema.Answer{ID: q.ID, Action: schema.AskAccept, Content: json.RawMessage(`{"word":"sealed"}`)})
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if err := s.nc.Publish(subject, sealed); err != nil {
		return r.fail("", "", err.Error())
	}
	sent := c.String() + "; on its answer subject, " + forgeries["unsealed"].what + ", " + forgeries["other key"].what + ", " +
		forgeries["other subject"].what + ", " + forgeries["other question"].what + ", then the answer sealed with the call's key, accepting {\"word\":\"sealed\"}"
	want := `result {"action":"accept","content":{"word":"sealed"}}: only the answer that opens with the call's key on its subject and names its question is taken`
	h, ok := x.await(answerWait)
	if !ok {
		return r.fail(sent, want, fmt.Sprintf("no reply within %v of the answer", answerWait))
	}
	reply, err := decode(h.msg)
	if err != nil || reply.Error != nil {
		return r.fail(sent, want, describe(h.msg))
	}
	if !sameJSON(reply.Result, []byte(`{"action":"accept","content":{"word":"sealed"}}`)) {
		var got struct {
			Content struct {
				Word string `json:"word"`
			} `json:"content"`
		}
		if json.Unmarshal(reply.Result, &got) == nil {
			if f, forged := forgeries[got.Content.Word]; forged {
				return r.fail(sent, want, describeReply(reply)+": the tool took "+f.what+", which anyone on the worker's credential could send")
			}
		}
		return r.fail(sent, want, describeReply(reply))
	}

	// A declined question.
	d := call{method: "conform.ask", id: s.id(), heartbeat: heartbeat, callID: nuid.Next(), askKey: schema.NewAskKey().String(), deadline: time.Now().Add(30 * time.Second)}
	dkey, _ := schema.ParseAskKey(d.askKey)
	y, err := s.send(d)
	if err != nil {
		return r.fail(d.String(), askWant, err.Error())
	}
	defer y.close()
	dq, dsubject, problem := y.question(answerWait)
	if problem != "" {
		return r.fail(d.String(), askWant, problem)
	}
	declined, err := schema.SealAnswer(dkey, dsubject, schema.Answer{ID: dq.ID, Action: schema.AskDecline})
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if err := s.nc.Publish(dsubject, declined); err != nil {
		return r.fail("", "", err.Error())
	}
	dsent := d.String() + ", then an answer declining the question"
	dwant := `result {"action":"decline","content":null}`
	if h, ok := y.await(answerWait); !ok {
		return r.fail(dsent, dwant, fmt.Sprintf("no reply within %v of the answer", answerWait))
	} else if reply, err := decode(h.msg); err != nil || reply.Error != nil || !sameJSON(reply.Result, []byte(`{"action":"decline","content":null}`)) {
		return r.fail(dsent, dwant, describe(h.msg))
	}

	// Calls that cannot be asked fail at once, without a question.
	for _, u := range []call{
		{method: "conform.ask", id: s.id(), heartbeat: heartbeat, callID: nuid.Next(), deadline: time.Now().Add(answerWait)},
		{method: "conform.ask", id: s.id(), callID: nuid.Next(), askKey: schema.NewAskKey().String(), deadline: time.Now().Add(answerWait)},
	} {
		why := "without Toolbus-Ask-Key"
		if u.askKey != "" {
			why = "with Toolbus-Ask-Key but without Toolbus-Heartbeat, which asking needs"
		}
		uwant := "an error at once, and no question: the call cannot be asked (" + why + ")"
		z, err := s.send(u)
		if err != nil {
			return r.fail(u.String(), uwant, err.Error())
		}
		defer z.close()
		for {
			h, ok := z.next(answerWait)
			if !ok {
				return r.fail(u.String(), uwant, fmt.Sprintf("nothing within %v", answerWait))
			}
			if p := h.msg.Header.Get(schema.HeaderProgress); p == schema.ProgressQuestion {
				return r.fail(u.String(), uwant, describe(h.msg)+": a question in a call whose caller cannot answer")
			} else if p != "" {
				continue
			}
			if reply, err := decode(h.msg); err != nil || reply.Error == nil {
				return r.fail(u.String(), uwant, describe(h.msg))
			}
			break
		}
	}
	return r.pass(fmt.Sprintf("question %s on %s; four forged answers dropped; a call without a key fails at once", q.ID, subject))
}

// question waits at most d for the question of x's call, filing every
// message, and returns it with its answer subject, or what was wrong:
// the reply came first, nothing came, a progress message before the ack,
// or a question that breaks rule 11.
func (x *exchange) question(d time.Duration) (schema.Question, string, string) {
	end := time.Now().Add(d)
	for {
		h, ok := x.next(time.Until(end))
		if !ok {
			return schema.Question{}, "", fmt.Sprintf("no question within %v", d)
		}
		p := h.msg.Header.Get(schema.HeaderProgress)
		switch {
		case p == "":
			return schema.Question{}, "", "the reply before any question: " + describe(h.msg)
		case len(x.progress) == 1 && p != schema.ProgressAck:
			return schema.Question{}, "", "the first progress message is " + describe(h.msg) + ", not the ack"
		case p != schema.ProgressQuestion:
			continue
		}
		q, err := schema.UnmarshalQuestion(h.msg.Data)
		if err != nil {
			return schema.Question{}, "", describe(h.msg) + ": " + err.Error()
		}
		if q.Message != askMessage || !sameJSON(q.Schema, []byte(askSchema)) {
			return schema.Question{}, "", fmt.Sprintf("%s: the message or the schema is not conform.ask's", describe(h.msg))
		}
		subject := h.msg.Header.Get(schema.HeaderAskReply)
		if err := schema.CheckAnswerSubject(subject); err != nil {
			return schema.Question{}, "", fmt.Sprintf("%s with %s %q: %v (an aggregator publishes no answer there)", describe(h.msg), schema.HeaderAskReply, subject, err)
		}
		return q, subject, ""
	}
}
