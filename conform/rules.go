package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// rule is one check of the kit.
type rule struct {
	key, ref, title string
	check           func(ctx context.Context, s *session, r rule) Result
}

func (r rule) run(ctx context.Context, s *session) Result { return r.check(ctx, s, r) }

func (r rule) result(st Status, note string) Result {
	return Result{Rule: r.key, Ref: r.ref, Title: r.title, Status: st, Note: note}
}

func (r rule) pass(note string) Result { return r.result(Pass, note) }
func (r rule) skip(why string) Result  { return r.result(Skip, why) }

func (r rule) fail(sent, want, got string) Result {
	res := r.result(Fail, "")
	res.Sent, res.Want, res.Got = sent, want, got
	return res
}

var (
	startRule = rule{key: "start", ref: "§1, §7", title: "the worker starts and answers conform.echo"}
	drainRule = rule{key: "drain", ref: "rule 6, §9", title: "on SIGTERM it announces that each method leaves, takes no new call, answers the calls it holds and exits"}
)

// rules are the checks between start and drain, in the order they run.
var rules = []rule{
	{"queue-group", "§1", "it serves in the queue group <prefix>-workers, so that each call reaches one worker", checkQueueGroup},
	{"envelope", "§2, §3, rule 1", "ids, params, method and caller reach the handler unchanged; one well-formed reply per call", checkEnvelope},
	{"encoding", "§4", "it reads str for bin, integers of any width, unknown keys, nil members and any key order", checkEncoding},
	{"batch", "§2", "calls in flight together each get their own answer, and a slow one stalls no other", checkBatch},
	{"notification", "rule 2", "notifications are run and never answered, and the worker keeps serving", checkNotification},
	{"errors", "rule 4", "a business error keeps its code (2001) and data", checkErrors},
	{"crash", "rule 4", "a crash in the handler is -32603 without a stack trace, and the worker keeps serving", checkCrash},
	{"version", "§4", "an envelope with a v other than 1 is refused, never run", checkVersion},
	{"unreadable", "§4", "a payload that is not a call envelope is refused, never run", checkUnreadable},
	{"late", "rule 3", "a call already past its Toolbus-Deadline is not run", checkLate},
	{"liveness", "rule 8", "ack at once, a heartbeat every interval, nothing after the reply, nothing unasked", checkLiveness},
	{"ack-delay", "rule 8", "an ack held back for Toolbus-Ack-Delay still comes, once and first, while a longer call runs", checkAckDelay},
	{"free-slots", "rule 10", "a reply asked with Toolbus-Name-Free names the worker's direct subject, and a call sent there is served", checkFreeSlots},
	{"deadline", "§2", "the handler stops when Toolbus-Deadline passes", checkDeadline},
	{"cancel", "rule 7", "a cancel message naming the call's Toolbus-Call-Id stops it", checkCancel},
	{"busy", "rule 8", "a call over the method's concurrency is refused busy at once", checkBusy},
	{"orphan", "rule 9", "a call whose reply subject nobody listens on any more is canceled", checkOrphan},
	{"progress", "rule 8", "progress reports are well formed, come before the reply and only when asked for", checkProgress},
	{"reply-subject", "§3", "it answers on the reply subject a call has, whatever its form: the ack, beats and reply of a call replying under <prefix>.reply (revision 10)", checkReplySubject},
	{"announce", "§9", "each method is announced on its own subject (revision 8), validly, the toolset is listed, and announcements repeat every interval and answer a ping", checkAnnounce},
	{"ask", "rule 11", "a tool that declares asks puts its question after the ack, takes only the answer sealed with the call's key, and cannot ask without one", checkAsk},
}

// ruleStart waits for the worker's first answer.
func (s *session) ruleStart(ctx context.Context) Result {
	r := startRule
	end := time.Now().Add(s.cfg.StartTimeout)
	last := "nothing"
	for tries := 0; time.Now().Before(end); tries++ {
		if exited, how := s.proc.exited(); exited {
			return r.fail(strings.Join(s.cfg.Command, " "), "a worker that serves conform.echo",
				"the worker "+how+" before it answered a call")
		}
		x, err := s.send(call{method: "conform.echo", id: s.id()})
		if err != nil {
			return r.fail("conform.echo", "an answer", err.Error())
		}
		h, ok := x.await(500 * time.Millisecond)
		x.close()
		if ok && !noResponders(h.msg) {
			return r.pass("")
		}
		if ok {
			last = "no responders: nobody subscribes to " + s.subject("conform.echo")
		} else {
			last = "no answer within 500ms"
		}
		if !ctxwait.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	return r.fail(fmt.Sprintf("conform.echo every 100ms for %v", s.cfg.StartTimeout),
		"an answer: the worker serves the conformance toolset", last+
			" (check that the worker connects to this NATS server, under this prefix, and serves conform.echo)")
}

// roundTrip sends c and waits for its reply.
func (s *session) roundTrip(c call, wait time.Duration) (*exchange, heard, bool, error) {
	x, err := s.send(c)
	if err != nil {
		return nil, heard{}, false, err
	}
	h, ok := x.await(wait)
	return x, h, ok, nil
}

// alive checks that the worker still answers conform.echo; it returns what
// went wrong, or "".
func (s *session) alive() string {
	c := call{method: "conform.echo", id: s.id(), params: `{"alive":true}`}
	x, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return err.Error()
	}
	defer x.close()
	if !ok {
		if exited, how := s.proc.exited(); exited {
			return "the worker " + how
		}
		return fmt.Sprintf("the worker no longer answers conform.echo (nothing within %v)", answerWait)
	}
	if reply, err := decode(h.msg); err != nil || reply.Error != nil {
		return "the worker no longer answers conform.echo with a result: " + describe(h.msg)
	}
	return ""
}

// echo sends the conform.echo call c and checks its reply with
// echoProblem. It returns the exchange, to be closed by the caller when
// not nil, the reply, and what went wrong, or "".
func (s *session) echo(c call) (*exchange, heard, string) {
	x, h, ok, err := s.roundTrip(c, answerWait)
	switch {
	case err != nil:
		return nil, heard{}, err.Error()
	case !ok:
		return x, heard{}, fmt.Sprintf("nothing within %v", answerWait)
	}
	return x, h, echoProblem(c, h)
}

// echoProblem checks the reply h to the conform.echo call c; it returns
// what is wrong, or "".
func echoProblem(c call, h heard) string {
	reply, err := decode(h.msg)
	if err != nil {
		return describe(h.msg)
	}
	if reply.Error != nil {
		return describeReply(reply)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(reply.Result, &got); err != nil {
		return "result " + string(reply.Result) + ", not an object"
	}
	want := map[string]string{"id": c.id, "method": `"` + c.method + `"`, "params": c.params}
	if c.id == "" {
		want["id"] = "null"
	}
	if c.params == "" {
		want["params"] = "null"
	}
	for _, k := range []string{"id", "method", "params"} {
		if v, ok := got[k]; !ok || !sameJSON(v, []byte(want[k])) {
			return fmt.Sprintf("result %s: its %q is %s, want %s", reply.Result, k, orAbsent(v, ok), want[k])
		}
	}
	v, ok := got["caller"]
	switch {
	case c.caller != "":
		if !ok || !sameJSON(v, mustJSON(c.caller)) {
			return fmt.Sprintf("result %s: its \"caller\" is %s, want %q", reply.Result, orAbsent(v, ok), c.caller)
		}
	case ok && !sameJSON(v, []byte("null")) && !sameJSON(v, []byte(`""`)):
		return fmt.Sprintf("result %s: its \"caller\" is %s, but the call named none", reply.Result, v)
	}
	return ""
}

func orAbsent(v json.RawMessage, ok bool) string {
	if !ok {
		return "absent"
	}
	return string(v)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only kit constants are marshalled
	}
	return b
}

const echoWant = `a result {"id": <the id>, "method": "conform.echo", "params": <the params, null when none>, "caller": <the caller, absent when none>}`

func checkQueueGroup(_ context.Context, s *session, r rule) Result {
	const n = 16
	taken := make(chan struct{}, n)
	sub, err := s.nc.QueueSubscribe(s.subject("conform.echo"), s.prefix+"-workers", func(*nats.Msg) { taken <- struct{}{} })
	if err != nil {
		return r.fail("", "", "the kit cannot join the queue group: "+err.Error())
	}
	defer sub.Unsubscribe()
	if err := s.nc.Flush(); err != nil {
		return r.fail("", "", "the kit cannot join the queue group: "+err.Error())
	}
	var xs []*exchange
	for range n {
		x, err := s.send(call{method: "conform.echo", id: s.id()})
		if err != nil {
			return r.fail("", "", err.Error())
		}
		defer x.close()
		xs = append(xs, x)
	}
	// Each call reaches either the worker, which answers it, or the kit's
	// own member of the group; a worker outside the group gets all of them.
	answered, kit := 0, 0
	end := time.Now().Add(answerWait)
	for _, x := range xs {
		if _, ok := x.await(time.Until(end)); ok {
			answered++
		}
	}
	time.Sleep(quiet)
	kit = len(taken)
	sent := fmt.Sprintf("%d calls of conform.echo, while the kit itself is a member of the queue group %s-workers that never answers", n, s.prefix)
	want := fmt.Sprintf("every call reaches one member: the worker answers those the kit's member did not get (%d in all)", n)
	if answered+kit != n || kit == 0 {
		return r.fail(sent, want, fmt.Sprintf("the worker answered %d and the kit's member got %d: the worker subscribes outside the queue group %s-workers, so every worker would run every call", answered, kit, s.prefix))
	}
	return r.pass(fmt.Sprintf("the worker answered %d, the kit's member got %d", answered, kit))
}

func checkEnvelope(_ context.Context, s *session, r rule) Result {
	ids := []string{`"101"`, `101`, `12345678901234567890`, `1.5e3`, `null`, `"ü \"quoted\""`, `-7`}
	params := []string{`{"big":12345678901234567890,"f":2.50,"s":"ü\"x","a":[1,{"b":null}],"e":{}}`, `[42,23]`, ``, `{}`, `[]`}
	var cs []call
	for i, id := range ids {
		c := call{method: "conform.echo", id: id, params: params[i%len(params)]}
		if i%2 == 0 {
			c.caller = "conform-kit"
		}
		cs = append(cs, c)
	}
	var xs []*exchange
	for _, c := range cs {
		x, err := s.send(c)
		if err != nil {
			return r.fail(c.String(), echoWant, err.Error())
		}
		defer x.close()
		xs = append(xs, x)
	}
	for _, x := range xs {
		h, ok := x.await(answerWait)
		if !ok {
			return r.fail(x.call.String(), echoWant, fmt.Sprintf("nothing within %v", answerWait))
		}
		if p := echoProblem(x.call, h); p != "" {
			return r.fail(x.call.String(), echoWant, p)
		}
	}
	if p := oneAnswer(r, xs); p != nil {
		return *p
	}
	return r.pass("")
}

// oneAnswer listens a moment longer on every exchange, and fails r when
// one got a second reply (rule 1).
func oneAnswer(r rule, xs []*exchange) *Result {
	time.Sleep(quiet)
	for _, x := range xs {
		x.listen(0)
		if len(x.replies) > 1 {
			res := r.fail(x.call.String(), "exactly one reply (rule 1)",
				fmt.Sprintf("%d replies: %s, then %s", len(x.replies), describe(x.replies[0].msg), describe(x.replies[1].msg)))
			return &res
		}
	}
	return nil
}

// envelopeMember is one key and value of a hand-made envelope.
type envelopeMember struct {
	key   string
	write func(e *msgpack.Encoder) error
}

// handmade encodes a msgpack map of members in the order given.
func handmade(members ...envelopeMember) []byte {
	var b bytes.Buffer
	e := msgpack.NewEncoder(&b)
	_ = e.EncodeMapLen(len(members))
	for _, m := range members {
		_ = e.EncodeString(m.key)
		_ = m.write(e)
	}
	return b.Bytes()
}

func str(s string) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error { return e.EncodeString(s) }
}
func bin(s string) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error { return e.EncodeBytes([]byte(s)) }
}
func nilValue(e *msgpack.Encoder) error { return e.EncodeNil() }

func checkEncoding(_ context.Context, s *session, r rule) Result {
	future := func(e *msgpack.Encoder) error {
		return e.Encode(map[string]any{"a": []int{1, 2}, "b": map[string]any{"c": nil}})
	}
	cases := []struct {
		what    string
		c       call
		payload []byte
	}{
		{"keys in reverse order, v as int64, id and params as str, an unknown key holding a map, caller nil",
			call{method: "conform.echo", id: `"s-1"`, params: `{"x":1}`},
			handmade(
				envelopeMember{"caller", nilValue},
				envelopeMember{"x-later", future},
				envelopeMember{"params", str(`{"x":1}`)},
				envelopeMember{"method", str("conform.echo")},
				envelopeMember{"id", str(`"s-1"`)},
				envelopeMember{"v", func(e *msgpack.Encoder) error { return e.EncodeInt64(1) }},
			)},
		{"v as uint8, an unknown key holding bin, params nil",
			call{method: "conform.echo", id: `2`},
			handmade(
				envelopeMember{"v", func(e *msgpack.Encoder) error { return e.EncodeUint8(1) }},
				envelopeMember{"x-later-bin", bin("\x00\x01")},
				envelopeMember{"id", bin(`2`)},
				envelopeMember{"method", str("conform.echo")},
				envelopeMember{"params", nilValue},
			)},
		{"v as uint16, method as bin, an unknown key holding a float",
			call{method: "conform.echo", id: `[3]`, params: `[3]`, caller: "kit"},
			handmade(
				envelopeMember{"v", func(e *msgpack.Encoder) error { return e.EncodeUint16(1) }},
				envelopeMember{"id", bin(`[3]`)},
				envelopeMember{"method", bin("conform.echo")},
				envelopeMember{"x-float", func(e *msgpack.Encoder) error { return e.EncodeFloat64(1.5) }},
				envelopeMember{"params", bin(`[3]`)},
				envelopeMember{"caller", bin("kit")},
			)},
	}
	for _, tc := range cases {
		c := tc.c
		c.payload = tc.payload
		x, h, ok, err := s.roundTrip(c, answerWait)
		if err != nil {
			return r.fail(tc.what, echoWant, err.Error())
		}
		x.close()
		sent := fmt.Sprintf("conform.echo with %s: % x", tc.what, tc.payload)
		if !ok {
			return r.fail(sent, echoWant, fmt.Sprintf("nothing within %v", answerWait))
		}
		if p := echoProblem(c, h); p != "" {
			return r.fail(sent, echoWant, p)
		}
	}
	return r.pass("")
}

func checkBatch(_ context.Context, s *session, r rule) Result {
	slow := call{method: "conform.sleep", id: s.id(), params: `{"ms":1500}`}
	xs := []*exchange{}
	sx, err := s.send(slow)
	if err != nil {
		return r.fail(slow.String(), "", err.Error())
	}
	defer sx.close()
	cs := []call{
		{method: "conform.echo", id: `"b"`, params: `["b"]`},
		{method: "conform.fail", id: s.id()},
		{method: "conform.echo", id: `"c"`, params: `["c"]`},
		{method: "conform.echo", id: `"b"`, params: `["b again"]`},
	}
	for _, c := range cs {
		x, err := s.send(c)
		if err != nil {
			return r.fail(c.String(), "", err.Error())
		}
		defer x.close()
		xs = append(xs, x)
	}
	sent := slow.String() + ", then at once " + fmt.Sprint(len(cs)) + " more calls (two with the same id, as a batch may have)"
	var last time.Time
	for _, x := range xs {
		h, ok := x.await(answerWait)
		if !ok {
			return r.fail(sent, "an answer to each", fmt.Sprintf("nothing for %s within %v", x.call, answerWait))
		}
		if x.call.method == "conform.echo" {
			if p := echoProblem(x.call, h); p != "" {
				return r.fail(sent, "each call its own answer: "+echoWant, fmt.Sprintf("for %s: %s", x.call, p))
			}
		} else if reply, err := decode(h.msg); err != nil || reply.Error == nil || reply.Error.Code != 2001 {
			return r.fail(sent, "each call its own answer: error 2001 for conform.fail", describe(h.msg))
		}
		last = h.at
	}
	h, ok := sx.await(answerWait)
	if !ok {
		return r.fail(sent, `result {"slept_ms":1500} for conform.sleep`, fmt.Sprintf("nothing within %v", answerWait))
	}
	if reply, err := decode(h.msg); err != nil || reply.Error != nil || !sameJSON(reply.Result, []byte(`{"slept_ms":1500}`)) {
		return r.fail(sent, `result {"slept_ms":1500} for conform.sleep`, describe(h.msg))
	}
	if !last.Before(h.at) {
		return r.fail(sent, "the quick calls answered while conform.sleep still runs",
			fmt.Sprintf("the last quick answer came %v after the call, after conform.sleep's (%v): one slow call stalls the others",
				last.Sub(sx.sentAt).Round(time.Millisecond), sx.since(h)))
	}
	if p := oneAnswer(r, append(xs, sx)); p != nil {
		return *p
	}
	for _, x := range append(xs, sx) {
		if len(x.progress) > 0 {
			return r.fail(x.call.String()+" without Toolbus-Heartbeat", "no progress message (rule 8: absent header, none at all)", describe(x.progress[0].msg))
		}
	}
	return r.pass("")
}

func checkNotification(_ context.Context, s *session, r rule) Result {
	cs := []call{
		{method: "conform.echo", params: `["note"]`},
		{method: "conform.fail"},
		{method: "conform.panic"},
		{method: "conform.sleep", params: `{"ms":10}`},
	}
	for _, c := range cs {
		if _, err := s.send(c); err != nil {
			return r.fail(c.String(), "", err.Error())
		}
	}
	time.Sleep(quiet)
	if p := s.alive(); p != "" {
		return r.fail("notifications of conform.echo, conform.fail, conform.panic and conform.sleep, then a call of conform.echo",
			"the worker keeps serving", p)
	}
	return r.pass("a notification has no reply subject, so the kit can only check that the worker keeps serving")
}

func checkErrors(_ context.Context, s *session, r rule) Result {
	c := call{method: "conform.fail", id: s.id(), params: `{}`}
	want := `error 2001 with a message and data {"conform":"fail"}`
	x, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return r.fail(c.String(), want, err.Error())
	}
	defer x.close()
	if !ok {
		return r.fail(c.String(), want, fmt.Sprintf("nothing within %v", answerWait))
	}
	reply, err := decode(h.msg)
	if err != nil || reply.Error == nil || reply.Error.Code != 2001 || reply.Error.Message == "" ||
		!sameJSON(reply.Error.Data, []byte(`{"conform":"fail"}`)) {
		return r.fail(c.String(), want, describe(h.msg))
	}
	return r.pass("")
}

// stackMarks are what the stack traces of common runtimes contain.
var stackMarks = []string{"\n", "goroutine ", ".go:", "Traceback", `.py", line`, "\tat ", "    at "}

func checkCrash(_ context.Context, s *session, r rule) Result {
	c := call{method: "conform.panic", id: s.id()}
	want := "error -32603 with a one-line message and no stack trace"
	x, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return r.fail(c.String(), want, err.Error())
	}
	defer x.close()
	if !ok {
		return r.fail(c.String(), want, fmt.Sprintf("nothing within %v", answerWait))
	}
	reply, err := decode(h.msg)
	if err != nil || reply.Error == nil || reply.Error.Code != schema.CodeInternal {
		return r.fail(c.String(), want, describe(h.msg))
	}
	for _, mark := range stackMarks {
		if strings.Contains(reply.Error.Message, mark) || strings.Contains(string(reply.Error.Data), mark) {
			return r.fail(c.String(), want, fmt.Sprintf("%s: it holds %q, a sign of a stack trace", describe(h.msg), mark))
		}
	}
	if p := s.alive(); p != "" {
		return r.fail(c.String()+", then a call of conform.echo", "the worker keeps serving after a crash", p)
	}
	return r.pass("")
}

// refused sends payload as a call of conform.echo and checks that it is
// not run: no answer, or an error. It returns the failure, or nil, and a
// note of the error answered.
func (s *session) refused(r rule, what string, payload []byte) (*Result, string) {
	c := call{method: "conform.echo", id: "1", payload: payload}
	sent := fmt.Sprintf("on %s, %s: % x", s.subject("conform.echo"), what, truncate(payload, 48))
	want := "no answer, or an error: the handler never runs"
	x, err := s.send(c)
	if err != nil {
		res := r.fail(sent, want, err.Error())
		return &res, ""
	}
	defer x.close()
	h, ok := x.await(quiet)
	if !ok {
		return nil, ""
	}
	reply, err := decode(h.msg)
	if err == nil && reply.Error != nil {
		return nil, describeReply(reply)
	}
	res := r.fail(sent, want, describe(h.msg))
	return &res, ""
}

func checkVersion(_ context.Context, s *session, r rule) Result {
	payload := handmade(
		envelopeMember{"v", func(e *msgpack.Encoder) error { return e.EncodeInt(2) }},
		envelopeMember{"id", bin("1")},
		envelopeMember{"method", str("conform.echo")},
	)
	if res, note := s.refused(r, "a call envelope with v 2", payload); res != nil {
		return *res
	} else if p := s.alive(); p != "" {
		return r.fail("a call envelope with v 2, then a call of conform.echo", "the worker keeps serving", p)
	} else {
		return r.pass(answeredNote(note))
	}
}

// answeredNote says how the payloads were refused: notes holds the
// error each was answered with, "" for none.
func answeredNote(notes ...string) string {
	silent, answered := 0, map[string]int{}
	var first []string
	for _, n := range notes {
		if n == "" {
			silent++
			continue
		}
		if answered[n] == 0 {
			first = append(first, n)
		}
		answered[n]++
	}
	var parts []string
	if silent > 0 {
		parts = append(parts, fmt.Sprintf("%d without an answer", silent))
	}
	for _, n := range first {
		parts = append(parts, fmt.Sprintf("%d with %s", answered[n], n))
	}
	return "refused " + strings.Join(parts, ", ")
}

func checkUnreadable(_ context.Context, s *session, r rule) Result {
	good, err := schema.MarshalCall(&schema.CallEnvelope{Version: 1, ID: []byte("1"), Method: "conform.echo"})
	if err != nil {
		return r.fail("", "", err.Error())
	}
	cases := []struct {
		what    string
		payload []byte
	}{
		{"the byte 0xc1, which msgpack never uses", []byte{0xc1}},
		{"a msgpack array, not a map", []byte{0x93, 0x01, 0x02, 0x03}},
		{"a call envelope cut short", good[:len(good)-3]},
		{"a call envelope followed by a stray byte", append(bytes.Clone(good), 0x00)},
		{"a call envelope whose v is the float 1.0 (floats are not integers)", handmade(
			envelopeMember{"v", func(e *msgpack.Encoder) error { return e.EncodeFloat64(1) }},
			envelopeMember{"id", bin("1")},
			envelopeMember{"method", str("conform.echo")},
		)},
		{"an empty payload", []byte{}},
	}
	var notes []string
	for _, tc := range cases {
		res, note := s.refused(r, tc.what, tc.payload)
		if res != nil {
			return *res
		}
		notes = append(notes, note)
	}
	if p := s.alive(); p != "" {
		return r.fail("unreadable payloads, then a call of conform.echo", "the worker keeps serving", p)
	}
	return r.pass(answeredNote(notes...))
}

func checkLate(_ context.Context, s *session, r rule) Result {
	c := call{method: "conform.echo", id: s.id(), params: `["late"]`, deadline: time.Now().Add(-time.Second),
		heartbeat: heartbeat, callID: nuid.Next()}
	want := "no answer (or an error), and no ack: the handler never runs"
	x, err := s.send(c)
	if err != nil {
		return r.fail(c.String(), want, err.Error())
	}
	defer x.close()
	x.listen(quiet)
	for _, p := range x.progress {
		if p.msg.Header.Get(schema.HeaderProgress) != schema.ProgressBusy {
			return r.fail(c.String(), want, describe(p.msg))
		}
	}
	note := ""
	if len(x.replies) > 0 {
		reply, err := decode(x.replies[0].msg)
		if err != nil || reply.Error == nil {
			return r.fail(c.String(), want, describe(x.replies[0].msg))
		}
		note = "answered " + describeReply(reply) + " (the aggregator has answered the call itself and ignores it)"
	}
	if p := s.alive(); p != "" {
		return r.fail(c.String()+", then a call of conform.echo", "the worker keeps serving", p)
	}
	return r.pass(note)
}

// liveness runs once the call that shows whether the worker speaks rule 8
// and rule 9, and returns the exchange, judged by checkLiveness.
func (s *session) liveness() (liveness, *exchange, error) {
	var err error
	s.liveOnce.Do(func() {
		c := call{method: "conform.sleep", id: s.id(), params: `{"ms":1200}`, heartbeat: heartbeat, misses: misses,
			callID: nuid.Next(), deadline: time.Now().Add(30 * time.Second)}
		var x *exchange
		if x, err = s.send(c); err != nil {
			return
		}
		defer x.close()
		s.liveX = x
		if _, ok := x.await(1200*time.Millisecond + answerWait); ok {
			x.listen(quiet + heartbeat)
		}
		for _, p := range x.progress {
			if p.msg.Header.Get(schema.HeaderProgress) == schema.ProgressAck {
				s.live.acks = true
				s.live.probes = p.msg.Reply != ""
				break
			}
		}
		if !s.live.acks {
			s.live.why = "the worker sent no ack for a call of conform.sleep with Toolbus-Heartbeat: it does not speak rule 8, which is optional"
		}
	})
	return s.live, s.liveX, err
}

func checkLiveness(_ context.Context, s *session, r rule) Result {
	live, x, err := s.liveness()
	if err != nil {
		return r.fail("conform.sleep with Toolbus-Heartbeat", "", err.Error())
	}
	sent := x.call.String()
	want := fmt.Sprintf("an ack at once, a beat every %v (a silence of %d intervals means a lost worker), nothing after the reply, then result {\"slept_ms\":1200}",
		heartbeat, misses)
	if len(x.replies) == 0 {
		return r.fail(sent, want, "no reply within "+(1200*time.Millisecond+answerWait).String())
	}
	reply := x.replies[0]
	if rep, err := decode(reply.msg); err != nil || rep.Error != nil || !sameJSON(rep.Result, []byte(`{"slept_ms":1200}`)) {
		return r.fail(sent, want, describe(reply.msg))
	}
	if len(x.progress) == 0 {
		return r.skip(live.why + " (the aggregator then waits for the reply until the deadline)")
	}
	if !live.acks {
		return r.fail(sent, want, "progress messages but no ack: "+describe(x.progress[0].msg))
	}
	times := []time.Time{}
	acks := 0
	for i, p := range x.progress {
		kind := p.msg.Header.Get(schema.HeaderProgress)
		switch {
		case i == 0 && kind != schema.ProgressAck:
			return r.fail(sent, want, "the first progress message is "+describe(p.msg)+", not the ack")
		case kind == schema.ProgressAck:
			acks++
		case kind == schema.ProgressBeat, kind == "report":
		default:
			return r.fail(sent, want, "an unknown progress message: "+describe(p.msg))
		}
		if kind != "report" && len(p.msg.Data) > 0 {
			return r.fail(sent, want, describe(p.msg)+": an ack or beat has an empty body")
		}
		if p.at.After(reply.at) {
			return r.fail(sent, want, fmt.Sprintf("%s %v after the call, after the reply (%v)", describe(p.msg), x.since(p), x.since(reply)))
		}
		times = append(times, p.at)
	}
	if acks != 1 {
		return r.fail(sent, want, fmt.Sprintf("%d acks", acks))
	}
	if len(times) < 2 {
		return r.fail(sent, want, "an ack and no beat while the call ran 1.2s")
	}
	times = append(times, reply.at)
	longest := time.Duration(0)
	for i := 1; i < len(times); i++ {
		longest = max(longest, times[i].Sub(times[i-1]))
	}
	if longest >= misses*heartbeat {
		return r.fail(sent, want, fmt.Sprintf("a silence of %v between progress messages: the aggregator would take the worker for lost", longest.Round(time.Millisecond)))
	}
	// Unasked, none.
	c := call{method: "conform.sleep", id: s.id(), params: `{"ms":300}`, callID: nuid.Next()}
	y, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return r.fail(c.String(), "", err.Error())
	}
	defer y.close()
	if !ok {
		return r.fail(c.String(), `result {"slept_ms":300}`, "nothing within "+answerWait.String())
	}
	if rep, err := decode(h.msg); err != nil || rep.Error != nil {
		return r.fail(c.String(), `result {"slept_ms":300}`, describe(h.msg))
	}
	if len(y.progress) > 0 {
		return r.fail(c.String()+" without Toolbus-Heartbeat", "no progress message at all", describe(y.progress[0].msg))
	}
	note := fmt.Sprintf("%d progress messages, the longest silence %v", len(x.progress), longest.Round(time.Millisecond))
	if live.probes {
		note += "; they carry a reply subject (rule 9)"
	}
	return r.pass(note)
}

// The calls of the ack-delay rule. The long one allows the ack to be held
// back half a heartbeat interval, the most toolbus's aggregator allows,
// and runs twenty times as long; the quick one allows seconds, so that a
// worker on a busy machine still answers conform.echo within the delay
// and the note says what the worker does, not how loaded the machine is.
const (
	ackDelay       = heartbeat / 2
	ackDelaySleep  = 20 * ackDelay
	quickHeartbeat = 4 * time.Second
	quickAckDelay  = quickHeartbeat / 2
)

func checkAckDelay(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if !live.acks {
		return r.skip(live.why + "; Toolbus-Ack-Delay only says when that ack may come")
	}
	result := fmt.Sprintf(`{"slept_ms":%d}`, ackDelaySleep.Milliseconds())
	long := call{method: "conform.sleep", id: s.id(), params: fmt.Sprintf(`{"ms":%d}`, ackDelaySleep.Milliseconds()),
		heartbeat: heartbeat, misses: misses, ackDelay: ackDelay, callID: nuid.Next(), deadline: time.Now().Add(30 * time.Second)}
	want := fmt.Sprintf("one ack, the first progress message, while the call runs (held back %v at most), a beat every %v after it, nothing after the reply, then result %s",
		ackDelay, heartbeat, result)
	x, h, ok, err := s.roundTrip(long, ackDelaySleep+answerWait)
	if err != nil {
		return r.fail(long.String(), want, err.Error())
	}
	defer x.close()
	if !ok {
		return r.fail(long.String(), want, "no reply within "+(ackDelaySleep+answerWait).String())
	}
	x.listen(quiet)
	if rep, err := decode(h.msg); err != nil || rep.Error != nil || !sameJSON(rep.Result, []byte(result)) {
		return r.fail(long.String(), want, describe(h.msg))
	}
	ack, problem := ackedOnce(x, h)
	if problem != "" {
		return r.fail(long.String(), want, problem)
	}
	if ack == nil {
		return r.fail(long.String(), want, fmt.Sprintf(
			"no progress message while the call ran %v, %d times the delay, although the worker acknowledges a call without Toolbus-Ack-Delay: "+
				"an ack may wait for the delay, not for the reply; without one the aggregator cannot tell the call from one no worker took",
			ackDelaySleep, ackDelaySleep/ackDelay))
	}
	longest, last := time.Duration(0), ack.at
	gap := func(at time.Time) { longest, last = max(longest, at.Sub(last)), at }
	for _, p := range x.progress {
		if p.at.After(ack.at) {
			gap(p.at)
		}
	}
	gap(h.at)
	if longest >= misses*heartbeat {
		return r.fail(long.String(), want, fmt.Sprintf("a silence of %v between progress messages after the ack: the aggregator would take the worker for lost", longest.Round(time.Millisecond)))
	}
	heldFor := ack.at.Sub(x.sentAt).Round(time.Millisecond)

	quick := call{method: "conform.echo", id: s.id(), params: `["quick"]`, heartbeat: quickHeartbeat, ackDelay: quickAckDelay, callID: nuid.Next()}
	want = echoWant + ", and no progress message but perhaps an ack before it (a worker may acknowledge at once)"
	y, qh, p := s.echo(quick)
	if y != nil {
		defer y.close()
	}
	if p != "" {
		return r.fail(quick.String(), want, p)
	}
	y.listen(quiet)
	quickAck, problem := ackedOnce(y, qh)
	if problem != "" {
		return r.fail(quick.String(), want, problem)
	}
	if quickAck != nil {
		return r.pass(fmt.Sprintf("it acknowledges at once, which is allowed (a worker that does not know Toolbus-Ack-Delay does): conform.echo got an ack %v after the call, before its reply; the ack of conform.sleep came %v after the call",
			y.since(*quickAck), heldFor))
	}
	return r.pass(fmt.Sprintf("it holds back the ack: conform.echo got its reply alone, and the ack of conform.sleep came %v after the call", heldFor))
}

func checkFreeSlots(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if !live.acks {
		return r.skip(live.why + "; rule 10 builds on rule 8's busy refusals")
	}
	asked := call{method: "conform.echo", id: s.id(), params: `["free"]`, heartbeat: heartbeat, misses: misses, callID: nuid.Next(), nameFree: true}
	want := echoWant + ", with Toolbus-Direct: " + s.prefix + ".direct.<id> and Toolbus-Free: 1 when the worker follows rule 10"
	x, h, p := s.echo(asked)
	if x != nil {
		defer x.close()
	}
	if p != "" {
		return r.fail(asked.String(), want, p)
	}
	direct, free := h.msg.Header.Get(schema.HeaderDirect), h.msg.Header.Get(schema.HeaderFree)
	if direct == "" && free == "" {
		return r.skip("the reply names no free slot: the worker does not follow rule 10, which is optional (calls reach it through the queue group, refused ones after a backoff)")
	}
	if !isDirect(s.prefix, direct) {
		return r.fail(asked.String(), want, fmt.Sprintf("Toolbus-Direct %q: not %s.direct. and one token of A-Z a-z 0-9 _ - (at most 64 bytes); an aggregator sends nothing there", direct, s.prefix))
	}
	if n, err := strconv.Atoi(free); err != nil || n < 1 {
		return r.fail(asked.String(), want, fmt.Sprintf("Toolbus-Free %q beside Toolbus-Direct: want a positive count, 1 for the slot the reply frees", free))
	}
	sent := call{method: "conform.echo", id: s.id(), params: `["direct"]`, heartbeat: heartbeat, misses: misses, callID: nuid.Next(), subject: direct + ".conform.echo"}
	y, _, p := s.echo(sent)
	if y != nil {
		defer y.close()
	}
	if p != "" {
		return r.fail(sent.String(), echoWant+", as from the queue group", p)
	}
	return r.pass(fmt.Sprintf("the reply named %s with Toolbus-Free %s, and conform.echo sent there was answered", direct, free))
}

// isDirect reports whether v is a direct subject of rule 10 under prefix:
// "<prefix>.direct." and one token of A-Z a-z 0-9 _ -, at most 64 bytes.
func isDirect(prefix, v string) bool {
	id, ok := strings.CutPrefix(v, prefix+".direct.")
	if !ok || id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ackedOnce checks the progress messages of a call whose reply is reply:
// at most one ack, coming first, then beats and reports, none after the
// reply. It returns the ack, nil when none came, or what is wrong.
func ackedOnce(x *exchange, reply heard) (*heard, string) {
	var ack *heard
	for i, p := range x.progress {
		kind := p.msg.Header.Get(schema.HeaderProgress)
		switch {
		case p.at.After(reply.at):
			return nil, fmt.Sprintf("%s %v after the call, after the reply (%v)", describe(p.msg), x.since(p), x.since(reply))
		case i == 0 && kind != schema.ProgressAck:
			return nil, "the first progress message is " + describe(p.msg) + ", not the ack"
		case kind == schema.ProgressAck && ack != nil:
			return nil, fmt.Sprintf("a second ack %v after the call", x.since(p))
		case kind == schema.ProgressAck:
			ack = &x.progress[i]
		case kind == schema.ProgressBeat, kind == schema.ProgressReport:
		default:
			return nil, "an unknown progress message: " + describe(p.msg)
		}
		if kind != schema.ProgressReport && len(p.msg.Data) > 0 {
			return nil, describe(p.msg) + ": an ack or beat has an empty body"
		}
	}
	return ack, ""
}

func checkDeadline(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	deadline := time.Now().Add(400 * time.Millisecond)
	c := call{method: "conform.sleep", id: s.id(), params: `{"ms":2500}`, deadline: deadline, callID: nuid.Next()}
	if live.acks {
		c.heartbeat = heartbeat
	}
	want := "no result: an error at the deadline (the aggregator's own -32001 goes first), or nothing"
	x, err := s.send(c)
	if err != nil {
		return r.fail(c.String(), want, err.Error())
	}
	defer x.close()
	sent := c.String()
	h, ok := x.await(2500*time.Millisecond + time.Second)
	if ok {
		x.listen(quiet)
		reply, err := decode(h.msg)
		if err != nil || reply.Error == nil {
			return r.fail(sent, want, fmt.Sprintf("%s %v after the call", describe(h.msg), x.since(h)))
		}
		if h.at.Sub(deadline) > 2*time.Second {
			return r.fail(sent, want, fmt.Sprintf("%s only %v after the call: the handler ran on past the deadline", describe(h.msg), x.since(h)))
		}
	}
	if live.acks {
		for _, p := range x.progress {
			if p.at.Sub(deadline) > 2*heartbeat+quiet {
				return r.fail(sent, want+", and no heartbeat after it", fmt.Sprintf("%s %v after the call: the handler still runs", describe(p.msg), x.since(p)))
			}
		}
	}
	if ok {
		return r.pass("answered " + describe(h.msg))
	}
	if !live.acks {
		return r.pass("nothing came; without heartbeats the kit cannot tell whether the handler stopped")
	}
	return r.pass("nothing came, and the heartbeats stopped")
}

func checkCancel(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	c := call{method: "conform.sleep", id: s.id(), params: `{"ms":2500}`, callID: nuid.Next(), deadline: time.Now().Add(30 * time.Second)}
	if live.acks {
		c.heartbeat = heartbeat
	}
	sent := c.String() + ", then its Toolbus-Call-Id on " + s.prefix + ".cancel"
	want := "no result: an error at once, or nothing, and no heartbeat after the cancel"
	x, err := s.send(c)
	if err != nil {
		return r.fail(sent, want, err.Error())
	}
	defer x.close()
	if live.acks {
		if h, ok := x.next(answerWait); !ok || h.msg.Header.Get(schema.HeaderProgress) != schema.ProgressAck {
			got := "nothing"
			if ok {
				got = describe(h.msg)
			}
			return r.fail(c.String(), "an ack", got)
		}
	} else {
		// Without an ack the kit cannot know the worker took the call;
		// it gives it a moment.
		time.Sleep(quiet)
	}
	canceled := time.Now()
	if err := s.nc.Publish(s.prefix+".cancel", []byte(c.callID)); err != nil {
		return r.fail(sent, want, err.Error())
	}
	h, ok := x.await(2500*time.Millisecond + time.Second)
	if ok {
		x.listen(quiet)
		reply, err := decode(h.msg)
		if err != nil || reply.Error == nil {
			return r.fail(sent, want, fmt.Sprintf("%s %v after the call: the call ran to its end", describe(h.msg), x.since(h)))
		}
		if h.at.Sub(x.sentAt) >= 2500*time.Millisecond {
			return r.fail(sent, want, fmt.Sprintf("%s only %v after the call: the handler slept on after the cancel", describe(h.msg), x.since(h)))
		}
	}
	for _, p := range x.progress {
		if p.at.Sub(canceled) > 2*heartbeat+quiet {
			return r.fail(sent, want, fmt.Sprintf("%s %v after the cancel: the handler still runs",
				describe(p.msg), p.at.Sub(canceled).Round(time.Millisecond)))
		}
	}
	if ok {
		return r.pass("answered " + describe(h.msg))
	}
	if !live.acks {
		return r.pass("nothing came; without heartbeats the kit cannot tell whether the handler stopped")
	}
	return r.pass("nothing came, and the heartbeats stopped")
}

// serial reports whether the worker serves conform.serial, or why not.
func (s *session) serial() (bool, string) {
	c := call{method: "conform.serial", id: s.id(), params: `{"ms":0}`}
	x, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return false, err.Error()
	}
	defer x.close()
	if !ok {
		return false, "conform.serial {\"ms\":0} got no answer within " + answerWait.String()
	}
	if noResponders(h.msg) {
		return false, "the worker does not serve conform.serial, so it declares no concurrency limit"
	}
	return true, ""
}

func checkBusy(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if !live.acks {
		return r.skip(live.why)
	}
	if ok, why := s.serial(); !ok {
		return r.skip(why)
	}
	a := call{method: "conform.serial", id: s.id(), params: `{"ms":1500}`, heartbeat: heartbeat, callID: nuid.Next()}
	b := call{method: "conform.serial", id: s.id(), params: `{"ms":0}`, heartbeat: heartbeat, callID: nuid.Next()}
	sent := a.String() + ", then " + b.String()
	want := "the second call refused at once with the progress message busy, and nothing else for it"
	xa, err := s.send(a)
	if err != nil {
		return r.fail(sent, want, err.Error())
	}
	defer xa.close()
	if h, ok := xa.next(answerWait); !ok || h.msg.Header.Get(schema.HeaderProgress) != schema.ProgressAck {
		return r.fail(a.String(), "an ack", "no ack within "+answerWait.String())
	}
	xb, err := s.send(b)
	if err != nil {
		return r.fail(sent, want, err.Error())
	}
	defer xb.close()
	h, ok := xb.next(time.Second)
	if !ok {
		return r.fail(sent, want, "nothing within 1s: the call waits in the worker for the slot")
	}
	if h.msg.Header.Get(schema.HeaderProgress) != schema.ProgressBusy {
		return r.fail(sent, want, describe(h.msg)+": the worker took a call over its limit")
	}
	if len(h.msg.Data) > 0 {
		return r.fail(sent, want, describe(h.msg)+": a busy message has an empty body")
	}
	xb.listen(quiet)
	if len(xb.progress)+len(xb.replies) > 1 {
		extra := append(xb.progress[1:], xb.replies...)
		return r.fail(sent, want, "after busy, "+describe(extra[0].msg))
	}
	if h, ok := xa.await(1500*time.Millisecond + answerWait); !ok {
		return r.fail(a.String(), `result {"slept_ms":1500}`, "nothing")
	} else if reply, err := decode(h.msg); err != nil || reply.Error != nil {
		return r.fail(a.String(), `result {"slept_ms":1500}`, describe(h.msg))
	}
	return r.pass("")
}

func checkOrphan(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	switch {
	case !live.acks:
		return r.skip(live.why)
	case !live.probes:
		return r.skip("the worker's progress messages carry no reply subject: it does not speak rule 9, which is optional (it then runs orphaned calls to completion)")
	}
	if ok, why := s.serial(); !ok {
		return r.skip(why + "; the kit sees an orphaned call end by the slot of conform.serial it frees")
	}
	o := call{method: "conform.serial", id: s.id(), params: `{"ms":20000}`, heartbeat: heartbeat, misses: misses,
		callID: nuid.Next(), deadline: time.Now().Add(30 * time.Second), reply: s.nc.NewInbox()}
	sent := o.String() + " with a reply subject nobody listens on, then conform.serial {\"ms\":0} with Toolbus-Heartbeat until it is taken"
	want := fmt.Sprintf("the orphaned call canceled after %d unheard progress messages, freeing the slot", misses)
	if _, err := s.send(o); err != nil {
		return r.fail(sent, want, err.Error())
	}
	// Should the worker not cancel it, the kit does, so that the drain
	// does not wait for it.
	defer s.nc.Publish(s.prefix+".cancel", []byte(o.callID))
	start := time.Now()
	end := start.Add(misses*heartbeat + 3*time.Second)
	for first := true; time.Now().Before(end); first = false {
		c := call{method: "conform.serial", id: s.id(), params: `{"ms":0}`, heartbeat: heartbeat, callID: nuid.Next()}
		x, err := s.send(c)
		if err != nil {
			return r.fail(sent, want, err.Error())
		}
		h, ok := x.next(answerWait)
		x.listen(0)
		x.close()
		if !ok {
			return r.fail(sent, want, "nothing for "+c.String())
		}
		switch h.msg.Header.Get(schema.HeaderProgress) {
		case schema.ProgressBusy:
		case schema.ProgressAck:
			if first {
				return r.fail(sent, want, "the first conform.serial after the orphaned call was taken at once: the orphaned call never held the slot")
			}
			return r.pass(fmt.Sprintf("the slot was free again %v after the orphaned call was sent", time.Since(start).Round(10*time.Millisecond)))
		default:
			return r.fail(sent, want, describe(h.msg))
		}
		time.Sleep(heartbeat)
	}
	return r.fail(sent, want, fmt.Sprintf("conform.serial still busy %v later: the orphaned call still runs", time.Since(start).Round(10*time.Millisecond)))
}

func checkProgress(_ context.Context, s *session, r rule) Result {
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	if !live.acks {
		return r.skip(live.why + "; progress reports ride on rule 8")
	}
	c := call{method: "conform.progress", id: s.id(), heartbeat: heartbeat, callID: nuid.Next()}
	want := `progress messages "report" with a JSON body {"percent": 0 to 100, "message": "..."} before the reply, then result {"done":true}`
	x, h, ok, err := s.roundTrip(c, answerWait)
	if err != nil {
		return r.fail(c.String(), want, err.Error())
	}
	defer x.close()
	if !ok {
		return r.fail(c.String(), want, "no reply within "+answerWait.String())
	}
	x.listen(quiet)
	if reply, err := decode(h.msg); err != nil || reply.Error != nil || !sameJSON(reply.Result, []byte(`{"done":true}`)) {
		return r.fail(c.String(), want, describe(h.msg))
	}
	var reports []heard
	for _, p := range x.progress {
		if p.msg.Header.Get(schema.HeaderProgress) == "report" {
			reports = append(reports, p)
		}
	}
	if len(reports) == 0 {
		return r.skip("the worker sent no progress report for conform.progress (reports are a recent addition to rule 8; a worker that sends none only leaves its jobs without progress)")
	}
	for _, p := range reports {
		var body struct {
			Percent *float64 `json:"percent"`
			Message *string  `json:"message"`
		}
		if err := json.Unmarshal(p.msg.Data, &body); err != nil || body.Percent == nil || *body.Percent < 0 || *body.Percent > 100 || body.Message == nil {
			return r.fail(c.String(), want, describe(p.msg))
		}
		if p.at.After(h.at) {
			return r.fail(c.String(), want, describe(p.msg)+" after the reply")
		}
	}
	u := call{method: "conform.progress", id: s.id(), callID: nuid.Next()}
	y, _, ok, err := s.roundTrip(u, answerWait)
	if err != nil {
		return r.fail(u.String(), "", err.Error())
	}
	defer y.close()
	y.listen(quiet)
	if len(y.progress) > 0 {
		return r.fail(u.String()+" without Toolbus-Heartbeat", "no progress message at all", describe(y.progress[0].msg))
	}
	if !ok {
		return r.fail(u.String(), `result {"done":true}`, "nothing")
	}
	return r.pass(fmt.Sprintf("%d reports", len(reports)))
}

// toolset is what announcements must list.
var toolset = []string{"conform.echo", "conform.sleep", "conform.fail", "conform.panic", "conform.progress"}

// ad is one announcement the kit heard: the method its subject names, and
// when it came.
type ad struct {
	method string
	schema.Announcement
	at time.Time
}

// announcements returns the announcements heard so far of the worker that
// announces conform.echo, and what is wrong with any announcement heard:
// one that cannot be read, one on the shared subject of the workers before
// revision 8, and one that does not carry the descriptor of its subject's
// method alone.
func (s *session) announcements() (mine []ad, problem string) {
	s.adMu.Lock()
	ads := append([]heard(nil), s.ads...)
	s.adMu.Unlock()
	worker := s.workerID
	var all []ad
	for _, h := range ads {
		a, bad, err := schema.ParseAnnouncement(h.msg.Data)
		if err != nil {
			return nil, fmt.Sprintf("announcement on %s %s: %v", h.msg.Subject, truncate(h.msg.Data, 300), err)
		}
		if len(bad) > 0 {
			return nil, fmt.Sprintf("announcement of %s on %s: descriptor %s: %v", a.Worker, h.msg.Subject, truncate(bad[0].Raw, 300), bad[0].Err)
		}
		method, own := s.subjects.AnnouncedMethod(h.msg.Subject)
		if !own {
			return nil, fmt.Sprintf("worker %s announced %d tools on %s, the one subject that workers before revision 8 shared, on which anyone may announce any tool: "+
				"announce each method on %s.<method> (a '*' token written %%2A, a '>' token %%3E) with its descriptor alone; toolbus's ingress still hears the shared subject for a release, but the shipped NATS configuration no longer lets workers publish there",
				a.Worker, len(a.Tools), h.msg.Subject, s.subjects.Announce())
		}
		if len(a.Tools) != 1 || a.Tools[0].Name != method {
			names := make([]string, len(a.Tools))
			for i, d := range a.Tools {
				names[i] = strconv.Quote(d.Name)
			}
			return nil, fmt.Sprintf("worker %s announced on %s the descriptors [%s]: a message on a method's subject carries that method's descriptor alone, and listeners drop any other",
				a.Worker, h.msg.Subject, strings.Join(names, ", "))
		}
		all = append(all, ad{method: method, Announcement: a, at: h.at})
		if schema.MatchMethod(method, "conform.echo") && !a.Leaving {
			if worker == "" {
				worker = a.Worker
			} else if a.Worker != worker {
				return nil, fmt.Sprintf("two workers announce conform.echo, %q and %q (run the kit on a NATS server no other worker of the toolset uses)", worker, a.Worker)
			}
		}
	}
	for _, x := range all {
		if x.Worker == worker && worker != "" {
			mine = append(mine, x)
		}
	}
	return mine, ""
}

// echoes returns the announcements among ads of the method or pattern
// that serves conform.echo, leaving ones left out, and when they came.
func echoes(ads []ad) (out []ad) {
	for _, x := range ads {
		if schema.MatchMethod(x.method, "conform.echo") && !x.Leaving {
			out = append(out, x)
		}
	}
	return out
}

// methods returns the methods and patterns ads announce, leaving ones
// left out.
func methods(ads []ad) map[string]bool {
	out := map[string]bool{}
	for _, x := range ads {
		if !x.Leaving {
			out[x.method] = true
		}
	}
	return out
}

func checkAnnounce(_ context.Context, s *session, r rule) Result {
	want := "each method announced on " + s.subjects.Announce() + ".<method> with its descriptor alone (revision 8), by one worker id, v 1, a positive interval_ms, valid descriptors of the toolset, repeated every interval"
	sent := "nothing (the kit listens on " + s.subjects.Announce() + ".> and on the shared " + s.subjects.Announce() + ")"
	mine, problem := s.announcements()
	if problem != "" {
		return r.fail(sent, want, problem)
	}
	if len(echoes(mine)) == 0 {
		// Heard nothing yet; ask, and give it a moment.
		_ = s.nc.Publish(s.subjects.DiscoveryPing(), nil)
		time.Sleep(time.Second)
		if mine, problem = s.announcements(); problem != "" {
			return r.fail(sent, want, problem)
		}
		if len(echoes(mine)) == 0 {
			return r.skip("the worker sent no announcement of conform.echo on " + s.subjects.Announce() + ".conform.echo: discovery is optional (§9), and the ingress then neither lists nor validates its tools")
		}
	}
	first := echoes(mine)[0]
	interval := first.Interval()
	if len(echoes(mine)) < 2 {
		time.Sleep(3*interval + time.Second)
		if mine, problem = s.announcements(); problem != "" {
			return r.fail(sent, want, problem)
		}
	}
	echo := echoes(mine)
	if len(echo) < 2 {
		return r.fail(sent, want, fmt.Sprintf("one announcement of %s, and none more in %v (interval_ms %d)", first.method, 3*interval+time.Second, first.IntervalMS))
	}
	longest := time.Duration(0)
	for i := 1; i < len(echo); i++ {
		longest = max(longest, echo[i].at.Sub(echo[i-1].at))
	}
	if longest >= 3*interval {
		return r.fail(sent, want, fmt.Sprintf("%v between two announcements of %s, with interval_ms %d: listeners forget a method after three intervals", longest.Round(time.Millisecond), first.method, first.IntervalMS))
	}
	announced := methods(mine)
	for _, name := range toolset {
		found := false
		for m := range announced {
			found = found || schema.MatchMethod(m, name)
		}
		if !found {
			return r.fail(sent, want, fmt.Sprintf("no announcement of %s on %s.%s (worker %s announced %d methods)", name, s.subjects.Announce(), name, first.Worker, len(announced)))
		}
	}
	n := len(echo)
	pinged := time.Now()
	if err := s.nc.Publish(s.subjects.DiscoveryPing(), nil); err != nil {
		return r.fail("", "", err.Error())
	}
	bound := min(interval/2, time.Second)
	for time.Since(pinged) < bound+quiet {
		time.Sleep(20 * time.Millisecond)
		if mine, _ = s.announcements(); len(echoes(mine)) > n {
			break
		}
	}
	if len(echoes(mine)) == n {
		return r.fail("an empty message on "+s.subjects.DiscoveryPing(), "an announcement at once", fmt.Sprintf("none within %v", bound+quiet))
	}
	s.workerID = first.Worker
	return r.pass(fmt.Sprintf("worker %s, %d methods each on its own subject, interval %v", first.Worker, len(announced), interval))
}

// ruleDrain stops the worker with SIGTERM while it holds a call.
func (s *session) ruleDrain(ctx context.Context) Result {
	r := drainRule
	live, _, err := s.liveness()
	if err != nil {
		return r.fail("", "", err.Error())
	}
	held := call{method: "conform.sleep", id: s.id(), params: `{"ms":3000}`, callID: nuid.Next()}
	if live.acks {
		held.heartbeat = heartbeat
	}
	sent := held.String() + ", then SIGTERM to the worker"
	x, err := s.send(held)
	if err != nil {
		return r.fail(sent, "", err.Error())
	}
	defer x.close()
	if live.acks {
		if _, ok := x.next(answerWait); !ok {
			return r.fail(held.String(), "an ack", "nothing")
		}
	} else {
		time.Sleep(quiet)
	}
	mine, adProblem := s.announcements()
	announced := methods(mine)
	signalled := time.Now()
	s.proc.signal(syscall.SIGTERM)
	var problems []string
	if len(mine) > 0 {
		s.workerID = mine[0].Worker
	}
	if len(announced) > 0 {
		// Each method leaves on its own subject.
		missing := slices.Sorted(maps.Keys(announced))
		for end := time.Now().Add(answerWait); len(missing) > 0 && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
			mine, _ = s.announcements()
			missing = slices.DeleteFunc(missing, func(m string) bool {
				return slices.ContainsFunc(mine, func(x ad) bool { return x.method == m && x.Leaving && !x.at.Before(signalled) })
			})
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("no announcement with \"leaving\": true of %s from worker %s within %v", strings.Join(missing, ", "), s.workerID, answerWait))
		}
	}
	// New calls: the worker unsubscribes first, so one soon finds no
	// responders (or is refused), never runs.
	stillServed := ""
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		c := call{method: "conform.echo", id: s.id()}
		y, h, ok, err := s.roundTrip(c, answerWait)
		if err != nil {
			return r.fail(sent, "", err.Error())
		}
		y.close()
		if !ok {
			stillServed = ""
			break
		}
		if reply, err := decode(h.msg); err != nil || reply.Error != nil {
			stillServed = ""
			break
		}
		stillServed = "conform.echo still answered " + describe(h.msg) + " 2s after SIGTERM: the worker did not unsubscribe first"
		time.Sleep(50 * time.Millisecond)
	}
	if stillServed != "" {
		problems = append(problems, stillServed)
	}
	if h, ok := x.await(3*time.Second + answerWait); !ok {
		problems = append(problems, "the call held at SIGTERM got no answer: "+s.exitNote())
	} else if reply, err := decode(h.msg); err != nil || reply.Error != nil || !sameJSON(reply.Result, []byte(`{"slept_ms":3000}`)) {
		problems = append(problems, "the call held at SIGTERM was answered "+describe(h.msg)+", not finished")
	}
	note := ""
	if s.proc.wait(s.cfg.DrainTimeout) {
		_, how := s.proc.exited()
		note = "the worker " + how
	} else {
		problems = append(problems, fmt.Sprintf("the worker did not exit within %v of SIGTERM", s.cfg.DrainTimeout))
	}
	if len(problems) > 0 {
		res := r.fail(sent, "a leaving announcement of each method (when it announces), no responders for new calls, the held call answered {\"slept_ms\":3000}, then exit",
			strings.Join(problems, ";\n"))
		res.Note = note
		return res
	}
	switch {
	case adProblem != "":
		note += "; its announcements break §9 (see rule announce), so its leaving was not checked"
	case len(announced) == 0:
		note += "; it never announced, so no leaving announcement was expected"
	}
	return r.pass(note)
}

func (s *session) exitNote() string {
	if exited, how := s.proc.exited(); exited {
		return "the worker " + how
	}
	return "the worker still runs"
}
