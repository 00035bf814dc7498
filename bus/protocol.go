package bus

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// The bus protocol on NATS (schema/PROTOCOL.md): the subjects a call
// travels on, and the messages that carry it and its answer.

// DefaultPrefix is the first subject token of every toolbus subject.
const DefaultPrefix = "toolbus"

// Subjects names the subjects of one toolbus cluster. Several clusters can
// share a NATS server under different prefixes. The zero value is not usable;
// make one with [NewSubjects].
type Subjects struct {
	prefix string
}

// NewSubjects returns the subjects under prefix, which must itself follow the
// method-name grammar (for example "toolbus" or "acme.toolbus").
func NewSubjects(prefix string) (Subjects, error) {
	if err := schema.ValidateMethod(prefix); err != nil {
		return Subjects{}, fmt.Errorf("bus: invalid subject prefix %q: %w", prefix, err)
	}
	return Subjects{prefix: prefix}, nil
}

// DefaultSubjects returns the subjects under [DefaultPrefix].
func DefaultSubjects() Subjects { return Subjects{prefix: DefaultPrefix} }

// Prefix returns the prefix; it is empty only for the zero value.
func (s Subjects) Prefix() string { return s.prefix }

// IsZero reports whether s is the zero value, which names nothing: an
// option that takes a Subjects refuses it.
func (s Subjects) IsZero() bool { return s.prefix == "" }

// Token returns the prefix as JetStream stream and bucket names may hold
// it, with every character outside A-Z a-z 0-9 _ - made '_', so that the
// names of several clusters' streams and buckets stay apart.
func (s Subjects) Token() string {
	return strings.Map(func(r rune) rune {
		if tokenRune(r) {
			return r
		}
		return '_'
	}, s.prefix)
}

// tokenRune reports whether r is one of A-Z a-z 0-9 _ -, the characters of
// stream names and of a worker's id in its direct subject.
func tokenRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_'
}

// Call returns the subject a call of method is published on. It fails for a
// name outside the method grammar and for reserved rpc.* names
// ([schema.CheckCallable]), so the result is never a wildcard and always
// lies under the prefix.
func (s Subjects) Call(method string) (string, error) {
	if err := schema.CheckCallable(method); err != nil {
		return "", err
	}
	return s.prefix + ".call." + method, nil
}

// CallPattern returns the subject a worker subscribes to for pattern, a
// method name whose tokens may also be '*' (one token) or, last, '>' (one or
// more tokens): "math.*" serves math.add and math.sub.
func (s Subjects) CallPattern(pattern string) (string, error) {
	if err := schema.ValidatePattern(pattern); err != nil {
		return "", fmt.Errorf("bus: %w", err)
	}
	if schema.IsReserved(pattern) {
		return "", fmt.Errorf("bus: method pattern %q is reserved for the ingress", pattern)
	}
	return s.prefix + ".call." + pattern, nil
}

// Method returns the method name of a call subject, or false when subject is
// not a call subject of this prefix.
func (s Subjects) Method(subject string) (string, bool) {
	p := s.prefix + ".call."
	if !strings.HasPrefix(subject, p) || len(subject) == len(p) {
		return "", false
	}
	return subject[len(p):], true
}

// Direct returns the subject prefix of the calls sent to the one worker
// runtime named id rather than to the queue group, "<prefix>.direct.<id>":
// a call of method m goes to Direct(id) + "." + m. A worker under load
// names it in [schema.HeaderDirect] with the free slots it has, so that an
// aggregator holding calls that busy workers refused sends one there at
// once (PROTOCOL.md, rule 10).
func (s Subjects) Direct(id string) string { return s.prefix + ".direct." + id }

// DirectMethod returns the method of a subject under direct (a value of
// [Subjects.Direct]), or false when subject is not one.
func (s Subjects) DirectMethod(direct, subject string) (string, bool) {
	if len(subject) <= len(direct)+1 || !strings.HasPrefix(subject, direct) || subject[len(direct)] != '.' {
		return "", false
	}
	return subject[len(direct)+1:], true
}

// IsDirect reports whether v names a worker's direct subject of this
// prefix: "<prefix>.direct." and one token of A-Z a-z 0-9 _ -. An
// aggregator sends calls only to such a subject, whatever a worker's
// header says.
func (s Subjects) IsDirect(v string) bool {
	p := s.prefix + ".direct."
	if !strings.HasPrefix(v, p) || len(v) == len(p) || len(v) > len(p)+64 {
		return false
	}
	for _, r := range v[len(p):] {
		if !tokenRune(r) {
			return false
		}
	}
	return true
}

// Cancel returns the subject on which the aggregator announces that a call
// it is still waiting for was canceled by its client; the body is the call's
// [schema.HeaderCallID]. Every worker subscribes to it (no queue group) and
// cancels the handler's context of that call, if it holds it.
func (s Subjects) Cancel() string { return s.prefix + ".cancel" }

// Replies is the subject prefix under which an ingress's aggregator
// receives everything the workers send about its synchronous calls, the
// ack, beats, progress reports, questions and the reply,
// "<prefix>.reply" (PROTOCOL.md, revision 10). Workers may publish
// there and never subscribe; an ingress subscribes. Unlike an inbox,
// which a worker may answer only through NATS allow_responses, a grant
// the server keeps per connection, a subject here stays open to the
// worker given the call when it reconnects through another NATS node.
// What keeps the other workers out is that each reply subject holds two
// [ReplyToken]s, which only the worker given the call learns.
func (s Subjects) Replies() string { return s.prefix + ".reply" }

// JobReplies is the subject prefix under which the job runner of an
// ingress receives the answers and progress messages of the calls that
// run jobs, "<prefix>.jobs.reply": a worker publishes there without the
// time limit on answering a call that its NATS permissions set.
func (s Subjects) JobReplies() string { return s.prefix + ".jobs.reply" }

// QueueGroup returns the queue group every worker of a method joins, so that
// each call reaches one worker.
func (s Subjects) QueueGroup() string { return s.prefix + "-workers" }

// ReplyTokenBytes is how many random bytes a [ReplyToken] carries: 128
// bits, so that nobody can guess one.
const ReplyTokenBytes = 16

// ReplyTokenLen is the length of a [ReplyToken] in characters: unpadded
// base64url of [ReplyTokenBytes] bytes.
const ReplyTokenLen = 22

// ReplyToken returns a fresh token for a subject that carries answers:
// [ReplyTokenBytes] bytes from crypto/rand in unpadded base64url, 22
// characters of A-Z a-z 0-9 - _, so that it is one NATS subject token and
// one token of the method grammar. Whoever answers on a subject made of it
// must have been given it: it is not a sequence and shares nothing with
// the tokens made before it, unlike a NUID, whose last ten characters
// count up. It is safe for concurrent use and allocates only the string.
func ReplyToken() string {
	var raw [ReplyTokenBytes]byte
	// crypto/rand.Read never returns an error: it ends the program when
	// the system has no randomness to give.
	rand.Read(raw[:])
	var text [ReplyTokenLen]byte
	base64.RawURLEncoding.Encode(text[:], raw[:])
	return string(text[:])
}

// CallMsg returns the NATS message of a call: the encoded envelope, with the
// deadline in [schema.HeaderDeadline] (none when deadline is zero) and the
// trace context in [schema.HeaderTraceparent] when traceparent is not empty.
// The caller sets Reply, or leaves it empty for a notification, and sets
// [schema.HeaderCallID] when it may cancel the call.
func CallMsg(subject string, env *schema.CallEnvelope, deadline time.Time, traceparent string) (*nats.Msg, error) {
	data, err := schema.MarshalCall(env)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if !deadline.IsZero() {
		msg.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(deadline))
	}
	if traceparent != "" {
		msg.Header.Set(schema.HeaderTraceparent, traceparent)
	}
	return msg, nil
}

// ReadCall decodes a call message and its deadline (zero when the message
// carries none).
func ReadCall(msg *nats.Msg) (*schema.CallEnvelope, time.Time, error) {
	env, err := schema.UnmarshalCall(msg.Data)
	if err != nil {
		return nil, time.Time{}, err
	}
	var deadline time.Time
	if v := msg.Header.Get(schema.HeaderDeadline); v != "" {
		if deadline, err = schema.ParseDeadline(v); err != nil {
			return nil, time.Time{}, err
		}
	}
	return env, deadline, nil
}

// Reply answers a call message with a reply envelope. It does nothing for a
// notification (a message without a reply subject).
func Reply(msg *nats.Msg, r *schema.ReplyEnvelope) error { return ReplyWith(msg, r, nil) }

// ReplyWith is [Reply] with the headers h on the reply, when not nil.
func ReplyWith(msg *nats.Msg, r *schema.ReplyEnvelope, h nats.Header) error {
	if msg.Reply == "" {
		return nil
	}
	data, err := schema.MarshalReply(r)
	if err != nil {
		return err
	}
	if h != nil {
		return msg.RespondMsg(&nats.Msg{Subject: msg.Reply, Data: data, Header: h})
	}
	return msg.Respond(data)
}

// ErrNoResponders means no worker is subscribed to the call's subject.
var ErrNoResponders = nats.ErrNoResponders

// noRespondersStatus is the Status header of the message NATS sends to a
// publisher's reply subject when nobody was subscribed to the subject it
// published on.
const noRespondersStatus = "503"

// NoResponders reports whether msg is the message NATS sends, on the reply
// subject of a message it delivered to nobody, to say that nobody was
// subscribed to that message's subject: an empty body with the header
// Status: 503.
func NoResponders(msg *nats.Msg) bool {
	return len(msg.Data) == 0 && msg.Header != nil && msg.Header.Get("Status") == noRespondersStatus
}

// ReadReply decodes a worker's reply. A NATS status message (such as "no
// responders") is reported as an error, never as an empty success.
func ReadReply(msg *nats.Msg) (*schema.ReplyEnvelope, error) {
	if NoResponders(msg) {
		return nil, ErrNoResponders
	}
	if len(msg.Data) == 0 && msg.Header != nil {
		if status := msg.Header.Get("Status"); status != "" {
			return nil, fmt.Errorf("bus: nats status %s: %s", status, msg.Header.Get("Description"))
		}
	}
	r, err := schema.UnmarshalReply(msg.Data)
	if err != nil {
		if errors.Is(err, schema.ErrEmptyReply) {
			return nil, err
		}
		// The subject is an inbox of toolbus's: it means nothing to an
		// agent, who may see this error's text.
		return nil, fmt.Errorf("bus: reply: %w", err)
	}
	return r, nil
}

// HeaderCarrier lets a trace propagator read and write the headers of a NATS
// message. Its methods are those of OpenTelemetry's
// propagation.TextMapCarrier, so
//
//	propagation.TraceContext{}.Inject(ctx, bus.HeaderCarrier(msg.Header))
//
// puts the W3C trace context of ctx into msg, and Extract reads it back,
// without this package depending on OpenTelemetry.
//
// Unlike http.Header, nats.Header does not canonicalise names, and NATS
// keeps their case on the wire: the lower-case names a W3C propagator uses,
// "traceparent" ([schema.HeaderTraceparent]) and "tracestate", are stored
// and sent exactly so.
// Get still finds a header whose name differs only in case, since HTTP,
// where these headers come from, ignores case.
//
// A nil HeaderCarrier reads as empty; Set on it panics, as on a nil map.
type HeaderCarrier nats.Header

// Get returns the first value of key, or, when there is no header of that
// exact name, of a header whose name equals key but for case; "" when there
// is none.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values of key with value, keeping key's case.
func (c HeaderCarrier) Set(key, value string) {
	c[key] = []string{value}
}

// Keys returns the names of the headers, in no particular order.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
