package bus

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/schema"
)

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
// name outside the method grammar and for reserved rpc.* names, so the
// result is never a wildcard and always lies under the prefix.
func (s Subjects) Call(method string) (string, error) {
	if err := schema.ValidateMethod(method); err != nil {
		return "", err
	}
	if schema.IsReserved(method) {
		return "", schema.NewError(schema.CodeMethodNotFound, "method not found: "+method+" is reserved for the ingress",
			map[string]any{"reason": schema.ReasonReserved})
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
