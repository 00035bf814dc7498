package conform_test

// This file is a worker written from schema/PROTOCOL.md alone, with nats.go
// and msgpack and nothing of toolbus: a stand-in for a worker in another
// language. It serves the conformance toolset of package conform, speaks
// rules 1 to 8 (with progress reports), 11 (questions, with AES-GCM of
// the standard library) and discovery, and leaves rule 9 (orphans), the
// held-back ack of revision 7 (Toolbus-Ack-Delay) and the sending again
// of a question that waits out, as the document allows. Its faults turn
// it into the broken workers the kit must catch.

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// fault is a way a broken worker breaks the protocol.
type fault string

const (
	// dropID: conform.echo's handler does not get the call's id.
	dropID fault = "drop-id"
	// ignoreCancel: cancel messages are not listened to.
	ignoreCancel fault = "ignore-cancel"
	// neverAck: heartbeats are sent, but no ack.
	neverAck fault = "never-ack"
	// crashSucceeds: a crash in a handler is answered with a null result.
	crashSucceeds fault = "crash-succeeds"
	// runLate: a call past its deadline is run all the same.
	runLate fault = "run-late"
	// noLeaving: no leaving announcement on shutdown.
	noLeaving fault = "no-leaving"
	// holdAck: a call that allows its ack to be held back
	// (Toolbus-Ack-Delay) gets no progress message at all, as if the
	// delay never ended.
	holdAck fault = "hold-ack"
	// badDirect: a reply asked for its free slot (Toolbus-Name-Free)
	// names a subject outside <prefix>.direct., which the worker does
	// not even listen on.
	badDirect fault = "bad-direct"
	// sharedAnnounce: the whole toolset is announced in one message on
	// <prefix>.discovery.announce, as workers before revision 8 did.
	sharedAnnounce fault = "shared-announce"
	// allOnOne: the whole toolset is announced in one message on
	// conform.echo's subject.
	allOnOne fault = "all-on-one"
	// plainAnswers: a message on an answer subject that does not open
	// with the call's key is read as a plain JSON answer.
	plainAnswers fault = "plain-answers"
	// askUnasked: conform.ask asks also in a call without
	// Toolbus-Ask-Key.
	askUnasked fault = "ask-unasked"
	// inboxOnly: nothing is sent on a reply subject outside "_INBOX", as
	// by a worker that checks that its reply subjects are inboxes.
	inboxOnly fault = "inbox-only"
	// noAsks: no tool is announced with "asks", as by a worker that does
	// not follow rule 11 (not a fault: the rule is optional).
	noAsks fault = "no-asks"
)

// foreign is the worker.
type foreign struct {
	nc     *nats.Conn
	prefix string
	faults map[fault]bool
	id     string

	subs   []*nats.Subscription
	serial chan struct{} // conform.serial's one slot

	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup

	stopAds chan struct{}
	adsDone chan struct{}
}

// startForeign serves the conformance toolset under prefix on nc, which
// it owns from then on, until stop.
func startForeign(nc *nats.Conn, prefix string, faults ...fault) (*foreign, error) {
	w := &foreign{nc: nc, prefix: prefix, faults: map[fault]bool{}, id: "foreign-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		serial: make(chan struct{}, 1), cancels: map[string]context.CancelFunc{},
		stopAds: make(chan struct{}), adsDone: make(chan struct{})}
	for _, f := range faults {
		w.faults[f] = true
	}
	sub, err := nc.QueueSubscribe(prefix+".call.conform.*", prefix+"-workers", w.receive)
	if err != nil {
		nc.Close()
		return nil, err
	}
	w.subs = append(w.subs, sub)
	if !w.faults[ignoreCancel] {
		if _, err := nc.Subscribe(prefix+".cancel", func(m *nats.Msg) {
			w.mu.Lock()
			cancel := w.cancels[string(m.Data)]
			w.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if _, err := nc.Subscribe(prefix+".discovery.ping", func(*nats.Msg) { w.announce(false) }); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	go w.announceLoop()
	return w, nil
}

const foreignInterval = 500 * time.Millisecond

func (w *foreign) announceLoop() {
	defer close(w.adsDone)
	t := time.NewTicker(foreignInterval)
	defer t.Stop()
	w.announce(false)
	for {
		select {
		case <-t.C:
			w.announce(false)
		case <-w.stopAds:
			return
		}
	}
}

// announce publishes one message per method, on the method's own
// subject, with the method's descriptor alone (revision 8).
func (w *foreign) announce(leaving bool) {
	var tools []map[string]any
	for _, name := range []string{"conform.echo", "conform.sleep", "conform.serial", "conform.fail", "conform.panic", "conform.progress", "conform.ask"} {
		tool := map[string]any{"name": name, "description": "conformance toolset"}
		if name == "conform.ask" && !w.faults[noAsks] {
			tool["asks"] = true
		}
		tools = append(tools, tool)
	}
	message := func(tools []map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"v": 1, "worker": w.id, "interval_ms": foreignInterval.Milliseconds(), "leaving": leaving, "tools": tools})
		return b
	}
	switch {
	case w.faults[sharedAnnounce]:
		_ = w.nc.Publish(w.prefix+".discovery.announce", message(tools))
	case w.faults[allOnOne]:
		_ = w.nc.Publish(w.prefix+".discovery.announce.conform.echo", message(tools))
	default:
		for _, t := range tools {
			_ = w.nc.Publish(w.prefix+".discovery.announce."+t["name"].(string), message([]map[string]any{t}))
		}
	}
}

// stop drains as rule 6 says: leave, stop taking calls, finish those held,
// close.
func (w *foreign) stop() {
	close(w.stopAds)
	<-w.adsDone
	if !w.faults[noLeaving] {
		w.announce(true)
	}
	for _, s := range w.subs {
		_ = s.Drain()
	}
	for _, s := range w.subs {
		for s.IsValid() {
			time.Sleep(5 * time.Millisecond)
		}
	}
	w.wg.Wait()
	_ = w.nc.Drain()
	for !w.nc.IsClosed() {
		time.Sleep(5 * time.Millisecond)
	}
}

// envelope is a decoded call envelope.
type envelope struct {
	id, params []byte
	hasID      bool
	method     string
	caller     string
}

var errRefused = errors.New("not a call envelope of version 1")

// decodeCall reads a call envelope as section 4 says: a map and nothing
// after it; v an integer 1 of any width; str or bin for raw members; nil
// for absent ones; unknown keys ignored.
func decodeCall(data []byte) (envelope, error) {
	var env envelope
	r := bytes.NewReader(data)
	d := msgpack.NewDecoder(r)
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil || r.Len() != 0 {
		return env, errRefused
	}
	switch v := m["v"].(type) {
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		if fmt.Sprint(v) != "1" {
			return env, errRefused
		}
	default:
		return env, errRefused
	}
	raw := func(k string) ([]byte, bool) {
		switch v := m[k].(type) {
		case []byte:
			return v, true
		case string:
			return []byte(v), true
		}
		return nil, false
	}
	env.id, env.hasID = raw("id")
	env.params, _ = raw("params")
	method, _ := raw("method")
	caller, _ := raw("caller")
	env.method, env.caller = string(method), string(caller)
	return env, nil
}

type replyError struct {
	Code    int    `msgpack:"code"`
	Message string `msgpack:"message"`
	Data    []byte `msgpack:"data,omitempty"`
}

type replyEnvelope struct {
	V      int         `msgpack:"v"`
	Result []byte      `msgpack:"result,omitempty"`
	Error  *replyError `msgpack:"error,omitempty"`
}

func (w *foreign) respond(m *nats.Msg, r replyEnvelope) {
	if m.Reply == "" || w.refusesReply(m) {
		return
	}
	r.V = 1
	b, err := msgpack.Marshal(r)
	if err != nil {
		return
	}
	if w.faults[badDirect] && m.Header.Get("Toolbus-Name-Free") != "" {
		_ = w.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: b,
			Header: nats.Header{"Toolbus-Direct": {w.prefix + ".jobs.cancel"}, "Toolbus-Free": {"1"}}})
		return
	}
	_ = w.nc.Publish(m.Reply, b)
}

// refusesReply reports whether the fault inboxOnly keeps the worker from
// answering on m's reply subject.
func (w *foreign) refusesReply(m *nats.Msg) bool {
	return w.faults[inboxOnly] && !strings.HasPrefix(m.Reply, "_INBOX")
}

func (w *foreign) progress(m *nats.Msg, kind string, body []byte) {
	if w.refusesReply(m) {
		return
	}
	msg := &nats.Msg{Subject: m.Reply, Header: nats.Header{"Toolbus-Progress": {kind}}, Data: body}
	_ = w.nc.PublishMsg(msg)
}

func (w *foreign) receive(m *nats.Msg) {
	env, err := decodeCall(m.Data)
	if err != nil {
		w.respond(m, replyEnvelope{Error: &replyError{Code: -32600, Message: "invalid request: " + err.Error()}})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	if v := m.Header.Get("Toolbus-Deadline"); v != "" {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err == nil && ns > 0 {
			deadline := time.Unix(0, ns)
			if !time.Now().Before(deadline) && !w.faults[runLate] {
				cancel()
				return
			}
			ctx, cancel = context.WithDeadline(ctx, deadline)
		}
	}
	beats := time.Duration(0)
	if ms, err := strconv.Atoi(m.Header.Get("Toolbus-Heartbeat")); err == nil && ms > 0 && m.Reply != "" {
		beats = min(max(time.Duration(ms)*time.Millisecond, 10*time.Millisecond), time.Minute)
	}
	// Otherwise it ignores Toolbus-Ack-Delay and acknowledges at once,
	// as a worker older than revision 7 does.
	held := w.faults[holdAck] && m.Header.Get("Toolbus-Ack-Delay") != ""
	if env.method == "conform.serial" {
		select {
		case w.serial <- struct{}{}:
		default:
			if beats > 0 {
				cancel()
				w.progress(m, "busy", nil)
				return
			}
			select {
			case w.serial <- struct{}{}:
			case <-ctx.Done():
				cancel()
				w.respond(m, replyEnvelope{Error: &replyError{Code: -32001, Message: "timed out waiting for a slot"}})
				return
			}
		}
	}
	callID := m.Header.Get("Toolbus-Call-Id")
	if callID != "" {
		w.mu.Lock()
		w.cancels[callID] = cancel
		w.mu.Unlock()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel()
		if env.method == "conform.serial" {
			defer func() { <-w.serial }()
		}
		if callID != "" {
			defer func() {
				w.mu.Lock()
				delete(w.cancels, callID)
				w.mu.Unlock()
			}()
		}
		var stopBeats func()
		if beats > 0 && !held {
			if !w.faults[neverAck] {
				w.progress(m, "ack", nil)
			}
			stopBeats = w.beat(m, beats)
		}
		// A call may be asked when it carries a key of 32 bytes and a
		// heartbeat (rule 11).
		var ask func(message, schema string) (answer, error)
		key, err := base64.RawURLEncoding.DecodeString(m.Header.Get("Toolbus-Ask-Key"))
		if beats > 0 && err == nil && len(key) == 32 || w.faults[askUnasked] && m.Reply != "" {
			ask = func(message, schema string) (answer, error) { return w.ask(ctx, m, key, message, schema) }
		}
		reply := w.run(ctx, env, func(percent float64, message string) {
			if beats > 0 && !held {
				b, _ := json.Marshal(map[string]any{"percent": percent, "message": message})
				w.progress(m, "report", b)
			}
		}, ask)
		if stopBeats != nil {
			stopBeats()
		}
		w.respond(m, reply)
	}()
}

// beat sends a heartbeat every interval until the returned function is
// called; once it returns, no more are sent.
func (w *foreign) beat(m *nats.Msg, interval time.Duration) func() {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				w.progress(m, "beat", nil)
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// answer is the plaintext of a sealed answer (rule 11).
type answer struct {
	ID      string          `json:"id"`
	Action  string          `json:"action"`
	Content json.RawMessage `json:"content,omitempty"`
}

// ask puts a question on the call m's reply subject and waits for the
// answer sealed with key on an answer subject under the connection's
// inbox prefix, or for ctx's end.
func (w *foreign) ask(ctx context.Context, m *nats.Msg, key []byte, message, schema string) (answer, error) {
	var raw [16]byte
	rand.Read(raw[:])
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	id, subject := "q"+token[:8], "_INBOX.ask."+token
	answers := make(chan answer, 1)
	sub, err := w.nc.Subscribe(subject, func(a *nats.Msg) {
		var got answer
		plain, err := openAnswer(key, subject, a.Data)
		switch {
		case err == nil:
			if json.Unmarshal(plain, &got) != nil {
				return
			}
		case w.faults[plainAnswers]:
			if json.Unmarshal(a.Data, &got) != nil {
				return
			}
		default:
			return
		}
		if got.ID != id {
			return
		}
		select {
		case answers <- got:
		default:
		}
	})
	if err != nil {
		return answer{}, err
	}
	defer sub.Unsubscribe()
	body, _ := json.Marshal(map[string]any{"id": id, "message": message, "schema": json.RawMessage(schema)})
	_ = w.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: body,
		Header: nats.Header{"Toolbus-Progress": {"question"}, "Toolbus-Ask-Reply": {subject}}})
	select {
	case a := <-answers:
		return a, nil
	case <-ctx.Done():
		return answer{}, ctx.Err()
	}
}

// openAnswer opens a sealed answer: a 12-byte nonce, then AES-256-GCM's
// ciphertext and tag, with the answer subject as additional data.
func openAnswer(key []byte, subject string, body []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if len(body) < 12 {
		return nil, errors.New("too short")
	}
	return gcm.Open(nil, body[:12], body[12:], []byte(subject))
}

// run runs the tool of env, turning a crash into -32603. ask, nil when
// the call cannot be asked, asks its caller a question.
func (w *foreign) run(ctx context.Context, env envelope, report func(float64, string), ask func(message, schema string) (answer, error)) (reply replyEnvelope) {
	defer func() {
		if p := recover(); p != nil {
			if w.faults[crashSucceeds] {
				reply = replyEnvelope{Result: []byte("null")}
				return
			}
			reply = replyEnvelope{Error: &replyError{Code: -32603, Message: "internal error: the tool crashed"}}
		}
	}()
	result := func(v any) replyEnvelope {
		b, err := json.Marshal(v)
		if err != nil {
			return replyEnvelope{Error: &replyError{Code: -32603, Message: "internal error: cannot encode the result"}}
		}
		return replyEnvelope{Result: b}
	}
	orNull := func(b []byte) json.RawMessage {
		if len(b) == 0 {
			return json.RawMessage("null")
		}
		return b
	}
	switch env.method {
	case "conform.echo":
		id := orNull(env.id)
		if w.faults[dropID] {
			id = json.RawMessage("null")
		}
		out := map[string]any{"id": id, "method": env.method, "params": orNull(env.params)}
		if env.caller != "" {
			out["caller"] = env.caller
		}
		return result(out)
	case "conform.sleep", "conform.serial":
		var p struct {
			MS int64 `json:"ms"`
		}
		if len(env.params) > 0 && json.Unmarshal(env.params, &p) != nil {
			return replyEnvelope{Error: &replyError{Code: -32602, Message: "invalid params: want {\"ms\": N}"}}
		}
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return result(map[string]int64{"slept_ms": p.MS})
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return replyEnvelope{Error: &replyError{Code: -32001, Message: "timed out", Data: []byte(`{"retryable":true}`)}}
			}
			return replyEnvelope{Error: &replyError{Code: -32004, Message: "canceled"}}
		}
	case "conform.fail":
		return replyEnvelope{Error: &replyError{Code: 2001, Message: "conform.fail failed", Data: []byte(`{"conform":"fail"}`)}}
	case "conform.panic":
		panic("conform.panic")
	case "conform.progress":
		report(50, "halfway")
		return result(map[string]bool{"done": true})
	case "conform.ask":
		if ask == nil {
			return replyEnvelope{Error: &replyError{Code: -32000, Message: "tool error: conform.ask asks its caller, which only a job's call can answer"}}
		}
		a, err := ask("conform asks", `{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)
		if err != nil {
			return replyEnvelope{Error: &replyError{Code: -32001, Message: "timed out waiting for the answer"}}
		}
		return result(map[string]any{"action": a.Action, "content": orNull(a.Content)})
	}
	return replyEnvelope{Error: &replyError{Code: -32601, Message: "method not found: " + env.method}}
}
