package schema

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Headers and values of questions (PROTOCOL.md, rule 11, revision 9). A
// call whose caller can answer a question carries [HeaderAskKey] (always
// with [HeaderHeartbeat]); a worker asks with a progress message whose
// [HeaderProgress] is [ProgressQuestion], whose [HeaderAskReply] names the
// subject the answer is to be published on, and whose body is a
// [Question]. The answer comes back on that subject, sealed with the key
// ([SealAnswer], [OpenAnswer]).
const (
	// HeaderAskKey, on a call message, says that the call's caller can
	// answer a question, and holds the AES-256 key that seals the
	// answers of this call: [AskKeyBytes] bytes in unpadded base64url,
	// [AskKeyLen] characters. An aggregator sets it only together with
	// HeaderHeartbeat.
	HeaderAskKey = "Toolbus-Ask-Key"
	// HeaderAskReply, on a [ProgressQuestion] message, is the subject the
	// answer is to be published on: "<inbox prefix>.ask.<token>" (see
	// [CheckAnswerSubject]).
	HeaderAskReply = "Toolbus-Ask-Reply"
	// ProgressQuestion, the value of HeaderProgress on a question: the
	// body is a [Question]. A question is also a sign of life, as a beat
	// is.
	ProgressQuestion = "question"
)

// Sizes and limits of questions and answers.
const (
	// AskKeyBytes is the length of an answer key: AES-256.
	AskKeyBytes = 32
	// AskKeyLen is the length of [HeaderAskKey]'s value: unpadded
	// base64url of AskKeyBytes bytes.
	AskKeyLen = 43
	// AskNonceBytes is the length of the nonce that starts a sealed
	// answer: the standard nonce of AES-GCM.
	AskNonceBytes = 12
	// AskTagBytes is the length of the authentication tag that ends a
	// sealed answer.
	AskTagBytes = 16
	// MaxQuestionMessageBytes is the longest message of a question, in
	// bytes of UTF-8.
	MaxQuestionMessageBytes = 4096
	// MaxQuestionBytes is the longest body of a question message, schema
	// included.
	MaxQuestionBytes = 16384
	// MaxQuestionIDBytes is the longest question id.
	MaxQuestionIDBytes = 64
	// MaxAnswerBytes is the longest plaintext of an answer.
	MaxAnswerBytes = 65536
	// AnswerTokenLen is the length of the last token of an answer
	// subject: 16 random bytes in unpadded base64url.
	AnswerTokenLen = 22
	// MaxAnswerSubjectBytes is the longest answer subject an aggregator
	// publishes on.
	MaxAnswerSubjectBytes = 256
)

// Errors of questions and answers.
var (
	// ErrBadQuestion means a question breaks the rules of rule 11: its
	// id, its message or its schema (see [CheckQuestionSchema]).
	ErrBadQuestion = errors.New("schema: bad question")
	// ErrBadAnswer means an answer cannot be opened with the key and the
	// subject it was sealed for, or opens to something that is not an
	// answer, or its content does not fit the question's schema.
	ErrBadAnswer = errors.New("schema: bad answer")
	// ErrBadAskKey means a [HeaderAskKey] value is not AskKeyBytes bytes
	// of unpadded base64url.
	ErrBadAskKey = errors.New("schema: bad ask key")
	// ErrBadAnswerSubject means a [HeaderAskReply] value is not a subject
	// an aggregator may publish an answer on.
	ErrBadAnswerSubject = errors.New("schema: bad answer subject")
)

// Question is the body of a [ProgressQuestion] message: what a running
// tool asks its caller. Schema is the flat object schema the answer's
// content must fit ([CheckQuestionSchema]).
type Question struct {
	// ID names the question within its call: 1 to [MaxQuestionIDBytes]
	// bytes of A-Z a-z 0-9 - _. The answer names it again.
	ID string `json:"id"`
	// Message is what the caller is asked, for a person: not empty, at
	// most [MaxQuestionMessageBytes] bytes of UTF-8.
	Message string `json:"message"`
	// Schema is the JSON Schema of the content of an accepting answer.
	Schema json.RawMessage `json:"schema"`
}

// AskAction is what the caller did with a question.
type AskAction string

// The actions of an [Answer], as MCP's elicitation names them.
const (
	// AskAccept: the caller answered; the answer has content.
	AskAccept AskAction = "accept"
	// AskDecline: the caller said no to the question itself.
	AskDecline AskAction = "decline"
	// AskCancel: the question was dismissed without a choice (the caller
	// went away, or the aggregator could not put the question at all).
	AskCancel AskAction = "cancel"
)

// Answer is the plaintext of a sealed answer.
type Answer struct {
	// ID is the id of the question answered.
	ID string `json:"id"`
	// Action is what the caller did.
	Action AskAction `json:"action"`
	// Content is the answer, a JSON object that fits the question's
	// schema; present with [AskAccept] only.
	Content json.RawMessage `json:"content,omitempty"`
}

// FieldError is a problem with one member of a JSON value: of a question's
// schema, or of an answer's content. It wraps [ErrBadQuestion] or
// [ErrBadAnswer].
type FieldError struct {
	// Field is the member, as a JSON pointer (RFC 6901) into the schema
	// or the content: "/properties/n/minimum", "/n". "" is the whole
	// value.
	Field string
	// Problem says what is wrong with it.
	Problem string
	err     error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%v: %s", e.err, e.Problem)
	}
	return fmt.Sprintf("%v: %s: %s", e.err, e.Field, e.Problem)
}

// Unwrap returns ErrBadQuestion or ErrBadAnswer.
func (e *FieldError) Unwrap() error { return e.err }

func questionField(problem string, tokens ...string) error {
	return &FieldError{Field: Pointer(tokens...), Problem: problem, err: ErrBadQuestion}
}

func answerField(problem string, tokens ...string) error {
	return &FieldError{Field: Pointer(tokens...), Problem: problem, err: ErrBadAnswer}
}

// ValidQuestionID reports whether id is a question id: 1 to
// [MaxQuestionIDBytes] bytes of A-Z a-z 0-9 - _.
func ValidQuestionID(id string) bool {
	if id == "" || len(id) > MaxQuestionIDBytes {
		return false
	}
	for i := range len(id) {
		if !isTokenByte(id[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Validate checks q as a worker must before it asks and an aggregator
// does when the question arrives: an id of [ValidQuestionID], a message
// that is not empty, valid UTF-8 and at most [MaxQuestionMessageBytes],
// and a schema that passes [CheckQuestionSchema]. Its errors wrap
// [ErrBadQuestion]; a schema's is a [*FieldError] naming the member.
func (q Question) Validate() error {
	switch {
	case !ValidQuestionID(q.ID):
		return fmt.Errorf("%w: id %q is not 1 to %d bytes of A-Z a-z 0-9 - _", ErrBadQuestion, TruncateUTF8(q.ID, 80), MaxQuestionIDBytes)
	case q.Message == "":
		return fmt.Errorf("%w: the message is empty: say what the caller is asked", ErrBadQuestion)
	case len(q.Message) > MaxQuestionMessageBytes:
		return fmt.Errorf("%w: the message is %d bytes, more than %d", ErrBadQuestion, len(q.Message), MaxQuestionMessageBytes)
	case !utf8.ValidString(q.Message):
		return fmt.Errorf("%w: the message is not valid UTF-8", ErrBadQuestion)
	}
	return CheckQuestionSchema(q.Schema)
}

// MarshalQuestion returns the body of a [ProgressQuestion] message:
// {"id":...,"message":...,"schema":...}, the schema compacted. It fails
// with an error wrapping [ErrBadQuestion] when q does not pass
// [Question.Validate] or the body would be longer than
// [MaxQuestionBytes].
func MarshalQuestion(q Question) ([]byte, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	b, err := marshalNoEscape(q)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadQuestion, err)
	}
	if len(b) > MaxQuestionBytes {
		return nil, fmt.Errorf("%w: the question is %d bytes, more than %d: give a shorter message or schema", ErrBadQuestion, len(b), MaxQuestionBytes)
	}
	return b, nil
}

// UnmarshalQuestion reads the body of a [ProgressQuestion] message and
// checks it with [Question.Validate]; members it does not know are
// ignored. Its errors wrap [ErrBadQuestion].
func UnmarshalQuestion(b []byte) (Question, error) {
	if len(b) > MaxQuestionBytes {
		return Question{}, fmt.Errorf("%w: the question is %d bytes, more than %d", ErrBadQuestion, len(b), MaxQuestionBytes)
	}
	var q Question
	if err := json.Unmarshal(b, &q); err != nil {
		return Question{}, fmt.Errorf("%w: %w", ErrBadQuestion, err)
	}
	if err := q.Validate(); err != nil {
		return Question{}, err
	}
	return q, nil
}

// marshalNoEscape marshals v as compact JSON without escaping <, > and &,
// so that a message reads as written.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Validate checks a's form: a question id, one of the three actions, and
// content, a JSON object, exactly when the action is [AskAccept]. It does
// not check the content against the question's schema
// ([CheckAnswerContent] does). Its errors wrap [ErrBadAnswer].
func (a Answer) Validate() error {
	if !ValidQuestionID(a.ID) {
		return fmt.Errorf("%w: id %q is not a question id", ErrBadAnswer, TruncateUTF8(a.ID, 80))
	}
	switch a.Action {
	case AskAccept:
		if len(a.Content) == 0 {
			return fmt.Errorf("%w: an accepting answer has no content", ErrBadAnswer)
		}
		if _, ok := object(a.Content); !ok {
			return fmt.Errorf("%w: the content is not a JSON object", ErrBadAnswer)
		}
	case AskDecline, AskCancel:
		if len(a.Content) != 0 {
			return fmt.Errorf("%w: a %s answer carries content", ErrBadAnswer, a.Action)
		}
	default:
		return fmt.Errorf("%w: action %q is none of accept, decline and cancel", ErrBadAnswer, TruncateUTF8(string(a.Action), 80))
	}
	return nil
}

// AskKey is the key that seals the answers of one call, AES-256. The zero
// value is a valid but worthless key: make one with [NewAskKey].
type AskKey [AskKeyBytes]byte

// NewAskKey returns a fresh key from crypto/rand, for one call.
func NewAskKey() AskKey {
	var k AskKey
	// crypto/rand.Read never returns an error: it ends the program when
	// the system has no randomness to give.
	rand.Read(k[:])
	return k
}

// String returns the key as [HeaderAskKey] carries it: unpadded
// base64url, [AskKeyLen] characters.
func (k AskKey) String() string { return base64.RawURLEncoding.EncodeToString(k[:]) }

// ParseAskKey reads a [HeaderAskKey] value. It fails with an error wrapping
// [ErrBadAskKey] unless s is exactly [AskKeyLen] characters of unpadded
// base64url.
func ParseAskKey(s string) (AskKey, error) {
	var k AskKey
	if len(s) != AskKeyLen {
		return k, fmt.Errorf("%w: %d characters, want %d of unpadded base64url", ErrBadAskKey, len(s), AskKeyLen)
	}
	n, err := base64.RawURLEncoding.Strict().Decode(k[:], []byte(s))
	if err != nil || n != AskKeyBytes {
		return AskKey{}, fmt.Errorf("%w: not unpadded base64url of %d bytes", ErrBadAskKey, AskKeyBytes)
	}
	return k, nil
}

func (k AskKey) aead() cipher.AEAD {
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key is always an AES key
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // the standard nonce and tag sizes are always supported
	}
	return gcm
}

// SealAnswer returns the body of an answer message on subject: a fresh
// nonce of [AskNonceBytes] bytes from crypto/rand, then the AES-256-GCM
// seal of a's JSON under key, with subject as additional data, so that
// the answer opens only on the subject it was sealed for. a must pass
// [Answer.Validate] and its JSON fit in [MaxAnswerBytes].
func SealAnswer(key AskKey, subject string, a Answer) ([]byte, error) {
	var nonce [AskNonceBytes]byte
	rand.Read(nonce[:])
	return sealAnswer(key, nonce, subject, a)
}

func sealAnswer(key AskKey, nonce [AskNonceBytes]byte, subject string, a Answer) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	plain, err := marshalNoEscape(a)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	if len(plain) > MaxAnswerBytes {
		return nil, fmt.Errorf("%w: the answer is %d bytes, more than %d", ErrBadAnswer, len(plain), MaxAnswerBytes)
	}
	out := make([]byte, AskNonceBytes, AskNonceBytes+len(plain)+AskTagBytes)
	copy(out, nonce[:])
	return key.aead().Seal(out, nonce[:], plain, []byte(subject)), nil
}

// OpenAnswer reads the body of an answer message that arrived on subject:
// it opens the seal with key and subject and checks the answer with
// [Answer.Validate]. A body sealed with another key or for another
// subject, cut or changed, fails with an error wrapping [ErrBadAnswer], as
// does one that opens to something that is not an answer.
func OpenAnswer(key AskKey, subject string, body []byte) (Answer, error) {
	if len(body) < AskNonceBytes+AskTagBytes || len(body) > AskNonceBytes+MaxAnswerBytes+AskTagBytes {
		return Answer{}, fmt.Errorf("%w: %d bytes is no sealed answer", ErrBadAnswer, len(body))
	}
	plain, err := key.aead().Open(nil, body[:AskNonceBytes], body[AskNonceBytes:], []byte(subject))
	if err != nil {
		return Answer{}, fmt.Errorf("%w: it does not open with the call's key on this subject", ErrBadAnswer)
	}
	var a Answer
	if err := json.Unmarshal(plain, &a); err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	if err := a.Validate(); err != nil {
		return Answer{}, err
	}
	return a, nil
}

// AnswerSubject returns the subject of the answer to a question:
// "<inboxPrefix>.ask.<token>". inboxPrefix is the asking worker's inbox
// prefix and token a fresh one of [AnswerTokenLen] characters.
func AnswerSubject(inboxPrefix, token string) string {
	return inboxPrefix + ".ask." + token
}

// CheckAnswerSubject checks a [HeaderAskReply] value before an aggregator
// publishes an answer on it, so that a worker can never make an
// aggregator publish on a subject of its choosing (a call, a job record):
// the subject must be "<inbox prefix>.ask.<token>", at most
// [MaxAnswerSubjectBytes] bytes, where the inbox prefix is one or more
// tokens of which the first starts with "_INBOX" (nats.go's "_INBOX",
// toolbus's "_INBOX_worker", a family's "_INBOX_worker_math"), every token
// is printable ASCII without wildcards, and the token is [AnswerTokenLen]
// characters of A-Z a-z 0-9 - _. Its errors wrap [ErrBadAnswerSubject].
func CheckAnswerSubject(subject string) error {
	if len(subject) > MaxAnswerSubjectBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadAnswerSubject, len(subject), MaxAnswerSubjectBytes)
	}
	tokens := strings.Split(subject, ".")
	n := len(tokens)
	bad := func(why string) error {
		return fmt.Errorf("%w: %q %s", ErrBadAnswerSubject, TruncateUTF8(subject, 80), why)
	}
	if n < 3 || tokens[n-2] != "ask" {
		return bad(`is not "<inbox prefix>.ask.<token>"`)
	}
	if len(tokens[n-1]) != AnswerTokenLen || !ValidQuestionID(tokens[n-1]) {
		return bad(fmt.Sprintf("does not end in a token of %d characters of A-Z a-z 0-9 - _", AnswerTokenLen))
	}
	if !strings.HasPrefix(tokens[0], "_INBOX") {
		return bad(`is not under an inbox prefix: its first token must start with "_INBOX"`)
	}
	for _, tok := range tokens[:n-2] {
		if tok == "" {
			return bad("has an empty token")
		}
		for i := range len(tok) {
			if c := tok[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '>' {
				return bad("has a wildcard, a space or a byte outside printable ASCII")
			}
		}
	}
	return nil
}

// Members a question's schema may have, at its top and on each property
// by the property's type (PROTOCOL.md, rule 11): the restricted form of
// MCP's elicitation.
var (
	topMembers      = []string{"type", "properties", "required"}
	commonMembers   = []string{"type", "title", "description", "default"}
	typeMembers     = map[string][]string{"string": {"enum", "format", "minLength", "maxLength"}, "number": {"minimum", "maximum"}, "integer": {"minimum", "maximum"}, "boolean": nil}
	questionFormats = []string{"email", "uri", "date", "date-time"}
)

// CheckQuestionSchema checks that raw is a question's schema: a flat
// object schema, {"type": "object", "properties": {...}, "required":
// [...]} and nothing else at its top, "required" optional and naming
// properties, each property an object whose "type" is "string" (with
// optional "enum", a non-empty array of distinct strings, "format", one of
// email, uri, date and date-time, "minLength" and "maxLength",
// non-negative integers), "number" or "integer" (with optional "minimum"
// and "maximum", numbers), or "boolean", and optional "title" and
// "description" (strings) and "default" (of the property's type) on each.
// Anything else is refused with a [*FieldError] naming the member as a
// JSON pointer into the schema.
func CheckQuestionSchema(raw json.RawMessage) error {
	top, ok := object(raw)
	if !ok {
		return questionField("the schema is not a JSON object")
	}
	if err := onlyMembers(top, topMembers); err != nil {
		return err
	}
	if s, ok := jsonString(top["type"]); !ok || s != "object" {
		return questionField(`must be "object"`, "type")
	}
	rawProps, ok := top["properties"]
	if !ok {
		return questionField(`is missing: a question's schema lists its properties`, "properties")
	}
	props, ok := object(rawProps)
	if !ok {
		return questionField("is not an object", "properties")
	}
	for _, name := range sortedKeys(props) {
		if err := checkProperty(name, props[name]); err != nil {
			return err
		}
	}
	if req, ok := top["required"]; ok {
		names, ok := stringArray(req)
		if !ok {
			return questionField("is not an array of strings", "required")
		}
		for i, n := range names {
			if _, ok := props[n]; !ok {
				return questionField(fmt.Sprintf("names %q, which is not a property", n), "required", fmt.Sprint(i))
			}
			if slices.Index(names, n) != i {
				return questionField(fmt.Sprintf("names %q twice", n), "required", fmt.Sprint(i))
			}
		}
	}
	return nil
}

func checkProperty(name string, raw json.RawMessage) error {
	p, ok := object(raw)
	if !ok {
		return questionField("is not an object", "properties", name)
	}
	typ, ok := jsonString(p["type"])
	extra, known := typeMembers[typ]
	if !ok || !known {
		return questionField("must be one of string, number, integer and boolean", "properties", name, "type")
	}
	for _, m := range sortedKeys(p) {
		if !slices.Contains(commonMembers, m) && !slices.Contains(extra, m) {
			return questionField(fmt.Sprintf("is not allowed on a %s property of a question", typ), "properties", name, m)
		}
	}
	for _, m := range []string{"title", "description"} {
		if v, ok := p[m]; ok {
			if _, ok := jsonString(v); !ok {
				return questionField("is not a string", "properties", name, m)
			}
		}
	}
	switch typ {
	case "string":
		if v, ok := p["enum"]; ok {
			vals, ok := stringArray(v)
			if !ok || len(vals) == 0 {
				return questionField("is not a non-empty array of strings", "properties", name, "enum")
			}
			for i, s := range vals {
				if slices.Index(vals, s) != i {
					return questionField(fmt.Sprintf("holds %q twice", s), "properties", name, "enum", fmt.Sprint(i))
				}
			}
		}
		if v, ok := p["format"]; ok {
			if f, ok := jsonString(v); !ok || !slices.Contains(questionFormats, f) {
				return questionField("must be one of email, uri, date and date-time", "properties", name, "format")
			}
		}
		lo, hi := -1, -1
		for _, m := range []string{"minLength", "maxLength"} {
			if v, ok := p[m]; ok {
				r, ok := number(v)
				if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() || r.Num().Int64() > 1<<31 {
					return questionField("is not a non-negative integer", "properties", name, m)
				}
				if m == "minLength" {
					lo = int(r.Num().Int64())
				} else {
					hi = int(r.Num().Int64())
				}
			}
		}
		if lo >= 0 && hi >= 0 && lo > hi {
			return questionField("is less than minLength", "properties", name, "maxLength")
		}
	case "number", "integer":
		var lo, hi *big.Rat
		for _, m := range []string{"minimum", "maximum"} {
			if v, ok := p[m]; ok {
				r, ok := number(v)
				if !ok {
					return questionField("is not a number", "properties", name, m)
				}
				if m == "minimum" {
					lo = r
				} else {
					hi = r
				}
			}
		}
		if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
			return questionField("is less than minimum", "properties", name, "maximum")
		}
	}
	if v, ok := p["default"]; ok {
		if problem := valueProblem(p, v); problem != "" {
			return questionField(problem, "properties", name, "default")
		}
	}
	return nil
}

// CheckAnswerContent checks the content of an accepting answer against
// the question's schema, which must pass [CheckQuestionSchema]: content is
// a JSON object, every required property is there, no member is not a
// property, and each value has its property's type (an integer may be
// written with a zero fraction, as JSON Schema allows), is one of its
// enum, and keeps to its minLength and maxLength (in characters) or its
// minimum and maximum. "format" is not checked, as JSON Schema leaves it
// an annotation. It fails with a [*FieldError] wrapping [ErrBadAnswer]
// that names the member as a JSON pointer into the content.
func CheckAnswerContent(questionSchema, content json.RawMessage) error {
	if err := CheckQuestionSchema(questionSchema); err != nil {
		return err
	}
	top, _ := object(questionSchema)
	props, _ := object(top["properties"])
	c, ok := object(content)
	if !ok {
		return answerField("the content is not a JSON object")
	}
	if req, ok := top["required"]; ok {
		names, _ := stringArray(req)
		for _, n := range names {
			if _, ok := c[n]; !ok {
				return answerField("is required", n)
			}
		}
	}
	for _, name := range sortedKeys(c) {
		rawProp, ok := props[name]
		if !ok {
			return answerField("is not a property of the question's schema", name)
		}
		p, _ := object(rawProp)
		if problem := valueProblem(p, c[name]); problem != "" {
			return answerField(problem, name)
		}
	}
	return nil
}

// valueProblem says what is wrong with v as a value of the property p (of
// a schema [CheckQuestionSchema] passed), or "".
func valueProblem(p map[string]json.RawMessage, v json.RawMessage) string {
	typ, _ := jsonString(p["type"])
	switch typ {
	case "string":
		s, ok := jsonString(v)
		if !ok {
			return "is not a string"
		}
		if e, ok := p["enum"]; ok {
			vals, _ := stringArray(e)
			if !slices.Contains(vals, s) {
				return fmt.Sprintf("is none of %s", e)
			}
		}
		n := utf8.RuneCountInString(s)
		if r, ok := number(p["minLength"]); ok && big.NewRat(int64(n), 1).Cmp(r) < 0 {
			return fmt.Sprintf("is shorter than %s characters", r.RatString())
		}
		if r, ok := number(p["maxLength"]); ok && big.NewRat(int64(n), 1).Cmp(r) > 0 {
			return fmt.Sprintf("is longer than %s characters", r.RatString())
		}
	case "number", "integer":
		r, ok := number(v)
		if !ok {
			return "is not a number"
		}
		if typ == "integer" && !r.IsInt() {
			return "is not an integer"
		}
		if lo, ok := number(p["minimum"]); ok && r.Cmp(lo) < 0 {
			return fmt.Sprintf("is less than the minimum %s", p["minimum"])
		}
		if hi, ok := number(p["maximum"]); ok && r.Cmp(hi) > 0 {
			return fmt.Sprintf("is more than the maximum %s", p["maximum"])
		}
	case "boolean":
		if b := bytes.TrimSpace(v); !bytes.Equal(b, []byte("true")) && !bytes.Equal(b, []byte("false")) {
			return "is not a boolean"
		}
	}
	return ""
}

// object reads raw as a JSON object, its members kept raw; false when it
// is anything else.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

func jsonString(raw json.RawMessage) (string, bool) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", false
	}
	return s, true
}

func stringArray(raw json.RawMessage) ([]string, bool) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || b[0] != '[' {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return nil, false
	}
	out := make([]string, len(items))
	for i, it := range items {
		s, ok := jsonString(it)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// number reads raw as a JSON number, exactly; false when it is anything
// else (or absent).
func number(raw json.RawMessage) (*big.Rat, bool) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || !(b[0] == '-' || b[0] >= '0' && b[0] <= '9') || !json.Valid(b) {
		return nil, false
	}
	// An exact number with a huge exponent would take a huge amount of
	// memory: the numbers of a question are small, and one that is not is
	// refused.
	if len(b) > 64 {
		return nil, false
	}
	if i := bytes.IndexAny(b, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(string(b[i+1:]), "+"))
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(string(b))
	return r, ok
}

// maxExponent bounds the decimal exponent of a number in a question's
// schema or an answer's content.
const maxExponent = 400

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// onlyMembers fails when the top of a question's schema has a member
// other than allowed.
func onlyMembers(m map[string]json.RawMessage, allowed []string) error {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(allowed, k) {
			return questionField("is not allowed at the top of a question's schema (type, properties and required only)", k)
		}
	}
	return nil
}
