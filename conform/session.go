package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Bounds of the kit's waits. Each is generous, since the kit may run on a
// busy machine next to an interpreter; none is a timing goal.
const (
	// answerWait bounds the wait for an answer the worker owes at once.
	answerWait = 5 * time.Second
	// quiet is how long the kit listens for a message that must not come.
	quiet = 300 * time.Millisecond
	// heartbeat is the interval the kit asks for in Toolbus-Heartbeat.
	heartbeat = 100 * time.Millisecond
	// misses is the Toolbus-Heartbeat-Misses the kit sends.
	misses = 3
)

// session is one run of the kit against one worker process.
type session struct {
	cfg    Config
	nc     *nats.Conn
	out    io.Writer
	prefix string
	proc   *process

	// subjects names the cluster's subjects; adSubs hear the
	// announcements, on the subject of each method (revision 8) and on the
	// shared one of older workers, which the announce rule fails.
	subjects bus.Subjects
	adSubs   []*nats.Subscription
	adMu     sync.Mutex
	ads      []heard

	nextID int

	liveOnce sync.Once
	live     liveness
	liveX    *exchange

	// workerID is the worker's id in its announcements, once seen.
	workerID string
}

// heard is a message and when it arrived.
type heard struct {
	msg *nats.Msg
	at  time.Time
}

// liveness is what the kit learned of the worker's rule 8 and 9: whether
// it acknowledges calls that ask for heartbeats, and whether its progress
// messages carry a reply subject of its own.
type liveness struct {
	acks, probes bool
	// why says what was seen when acks is false.
	why string
}

func newSession(ctx context.Context, cfg Config) (*session, error) {
	s := &session{cfg: cfg, nc: cfg.Conn, out: cfg.Out, prefix: cfg.Prefix}
	if s.out == nil {
		s.out = io.Discard
	}
	var err error
	if s.subjects, err = bus.NewSubjects(s.prefix); err != nil {
		return nil, fmt.Errorf("conform: %w", err)
	}
	record := func(m *nats.Msg) {
		s.adMu.Lock()
		s.ads = append(s.ads, heard{msg: m, at: time.Now()})
		s.adMu.Unlock()
	}
	for _, subject := range []string{s.subjects.Announce() + ".>", s.subjects.Announce()} {
		sub, err := s.nc.Subscribe(subject, record)
		if err != nil {
			s.unsubscribeAds()
			return nil, fmt.Errorf("conform: subscribe to announcements: %w (check that the NATS user may subscribe to %s)", err, subject)
		}
		s.adSubs = append(s.adSubs, sub)
	}
	if err := s.nc.FlushTimeout(answerWait); err != nil {
		s.unsubscribeAds()
		return nil, fmt.Errorf("conform: NATS does not answer: %w (check --nats and the credentials)", err)
	}
	env := []string{"TOOLBUS_PREFIX=" + s.prefix}
	if u := s.nc.ConnectedUrl(); u != "" {
		env = append(env, "TOOLBUS_NATS_URL="+u)
	}
	s.proc, err = startProcess(ctx, cfg.Command, append(env, cfg.Env...), cfg.WorkerOutput)
	if err != nil {
		s.unsubscribeAds()
		return nil, err
	}
	return s, nil
}

// stop ends the worker if it still runs.
func (s *session) stop() { s.proc.kill() }

func (s *session) close() {
	s.stop()
	s.unsubscribeAds()
}

func (s *session) unsubscribeAds() {
	for _, sub := range s.adSubs {
		sub.Unsubscribe()
	}
	s.adSubs = nil
}

func (s *session) subject(method string) string { return s.prefix + ".call." + method }

// id returns a fresh JSON-RPC id, a number.
func (s *session) id() string {
	s.nextID++
	return strconv.Itoa(s.nextID)
}

// call is one call message the kit sends.
type call struct {
	method string
	// id is the raw JSON id; empty for a notification, which is
	// published without a reply subject.
	id     string
	params string
	caller string
	// deadline, heartbeat, misses and ackDelay set the headers of the
	// same names when not zero; callID sets Toolbus-Call-Id.
	deadline  time.Time
	heartbeat time.Duration
	misses    int
	ackDelay  time.Duration
	callID    string
	// askKey sets Toolbus-Ask-Key (rule 11) when not empty.
	askKey string
	// nameFree sets Toolbus-Name-Free (rule 10); subject, when set, is
	// the subject published on in place of the method's.
	nameFree bool
	subject  string
	// payload, when not nil, is sent in place of the encoded envelope.
	payload []byte
	// reply, when set, is the reply subject, on which nobody listens.
	reply string
}

// String describes the call for a result line.
func (c call) String() string {
	var b strings.Builder
	b.WriteString(c.method)
	if c.params != "" {
		b.WriteString(" " + c.params)
	}
	var parts []string
	if c.id == "" {
		parts = append(parts, "a notification")
	} else {
		parts = append(parts, "id "+c.id)
	}
	if !c.deadline.IsZero() {
		parts = append(parts, fmt.Sprintf("Toolbus-Deadline %+dms from sending", time.Until(c.deadline).Round(time.Millisecond).Milliseconds()))
	}
	if c.heartbeat > 0 {
		parts = append(parts, fmt.Sprintf("Toolbus-Heartbeat %d", c.heartbeat.Milliseconds()))
	}
	if c.ackDelay > 0 {
		parts = append(parts, fmt.Sprintf("Toolbus-Ack-Delay %d", c.ackDelay.Milliseconds()))
	}
	if c.nameFree {
		parts = append(parts, "Toolbus-Name-Free 1")
	}
	if c.subject != "" {
		parts = append(parts, "on "+c.subject)
	}
	if c.callID != "" {
		parts = append(parts, "Toolbus-Call-Id "+c.callID)
	}
	if c.askKey != "" {
		parts = append(parts, "Toolbus-Ask-Key "+c.askKey)
	}
	if c.payload != nil {
		parts = append(parts, fmt.Sprintf("payload % x", truncate(c.payload, 48)))
	}
	return b.String() + " (" + strings.Join(parts, ", ") + ")"
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// exchange is one call in flight and what came back on its reply subject.
type exchange struct {
	call   call
	sub    *nats.Subscription
	ch     chan *nats.Msg
	sentAt time.Time
	// progress holds the progress messages, replies everything else, in
	// the order they came.
	progress, replies []heard
}

// send publishes c, listening on a fresh reply subject unless c is a
// notification or names its own.
func (s *session) send(c call) (*exchange, error) {
	x := &exchange{call: c}
	data := c.payload
	if data == nil {
		env := &schema.CallEnvelope{Version: schema.EnvelopeVersion, Method: c.method, Caller: c.caller}
		if c.id != "" {
			env.ID = []byte(c.id)
		}
		if c.params != "" {
			env.Params = []byte(c.params)
		}
		var err error
		if data, err = schema.MarshalCall(env); err != nil {
			return nil, fmt.Errorf("conform: encode %s: %w", c, err)
		}
	}
	msg := &nats.Msg{Subject: s.subject(c.method), Data: data, Header: nats.Header{}}
	if c.subject != "" {
		msg.Subject = c.subject
	}
	if c.nameFree {
		msg.Header.Set(schema.HeaderNameFree, "1")
	}
	if !c.deadline.IsZero() {
		msg.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(c.deadline))
	}
	if c.heartbeat > 0 {
		msg.Header.Set(schema.HeaderHeartbeat, strconv.FormatInt(c.heartbeat.Milliseconds(), 10))
	}
	if c.misses > 0 {
		msg.Header.Set(schema.HeaderHeartbeatMisses, strconv.Itoa(c.misses))
	}
	if c.ackDelay > 0 {
		msg.Header.Set(schema.HeaderAckDelay, strconv.FormatInt(c.ackDelay.Milliseconds(), 10))
	}
	if c.callID != "" {
		msg.Header.Set(schema.HeaderCallID, c.callID)
	}
	if c.askKey != "" {
		msg.Header.Set(schema.HeaderAskKey, c.askKey)
	}
	switch {
	case c.reply != "":
		msg.Reply = c.reply
	case c.id != "" || c.payload != nil:
		msg.Reply = s.nc.NewInbox()
		x.ch = make(chan *nats.Msg, 4096)
		sub, err := s.nc.ChanSubscribe(msg.Reply, x.ch)
		if err != nil {
			return nil, fmt.Errorf("conform: subscribe to a reply subject: %w", err)
		}
		x.sub = sub
	}
	x.sentAt = time.Now()
	if err := s.nc.PublishMsg(msg); err != nil {
		x.close()
		return nil, fmt.Errorf("conform: publish %s: %w", c, err)
	}
	return x, nil
}

func (x *exchange) close() {
	if x.sub != nil {
		x.sub.Unsubscribe()
	}
}

// next waits at most d for the next message on the reply subject and
// files it.
func (x *exchange) next(d time.Duration) (heard, bool) {
	if x.ch == nil {
		return heard{}, false
	}
	// A message already there is taken even when the time is up.
	select {
	case m := <-x.ch:
		return x.file(m), true
	default:
	}
	if d <= 0 {
		return heard{}, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-x.ch:
		return x.file(m), true
	case <-t.C:
		return heard{}, false
	}
}

func (x *exchange) file(m *nats.Msg) heard {
	h := heard{msg: m, at: time.Now()}
	if isProgress(m) {
		x.progress = append(x.progress, h)
	} else {
		x.replies = append(x.replies, h)
	}
	return h
}

// await waits at most d for the reply, filing the progress messages that
// come before it; false when none came.
func (x *exchange) await(d time.Duration) (heard, bool) {
	end := time.Now().Add(d)
	for {
		h, ok := x.next(time.Until(end))
		if !ok {
			return heard{}, false
		}
		if !isProgress(h.msg) {
			return h, true
		}
	}
}

// listen files every message that comes within d.
func (x *exchange) listen(d time.Duration) {
	end := time.Now().Add(d)
	for {
		if _, ok := x.next(time.Until(end)); !ok {
			return
		}
	}
}

func isProgress(m *nats.Msg) bool { return m.Header.Get(schema.HeaderProgress) != "" }

func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// decode reads a reply as the aggregator does.
func decode(m *nats.Msg) (*schema.ReplyEnvelope, error) {
	if noResponders(m) {
		return nil, fmt.Errorf("no responders (the NATS status message 503: nobody is subscribed to the call's subject)")
	}
	return schema.UnmarshalReply(m.Data)
}

// describe says what a message on a reply subject was, for a result line.
func describe(m *nats.Msg) string {
	if p := m.Header.Get(schema.HeaderProgress); p != "" {
		s := "a progress message " + strconv.Quote(p)
		if len(m.Data) > 0 {
			s += " with body " + string(truncate(m.Data, 200))
		}
		return s
	}
	r, err := decode(m)
	if err != nil {
		if noResponders(m) {
			return err.Error()
		}
		return fmt.Sprintf("an unreadable reply (%v), payload % x", err, truncate(m.Data, 48))
	}
	return describeReply(r)
}

func describeReply(r *schema.ReplyEnvelope) string {
	if r.Error == nil {
		return "result " + string(truncate(r.Result, 300))
	}
	s := fmt.Sprintf("error %d %q", r.Error.Code, r.Error.Message)
	if len(r.Error.Data) > 0 {
		s += " data " + string(truncate(r.Error.Data, 300))
	}
	return s
}

// since says how long after the call was sent h arrived.
func (x *exchange) since(h heard) string {
	return h.at.Sub(x.sentAt).Round(time.Millisecond).String()
}

// sameJSON reports whether a and b hold the same JSON value: objects
// compare member by member in any order, numbers by their exact value,
// whatever their spelling.
func sameJSON(a, b []byte) bool {
	va, ok := readJSON(a)
	if !ok {
		return false
	}
	vb, ok := readJSON(b)
	return ok && sameValue(va, vb)
}

func readJSON(b []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	return v, true
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, oka := new(big.Rat).SetString(a.String())
		rb, okb := new(big.Rat).SetString(b.String())
		return oka && okb && ra.Cmp(rb) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
