package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

const flatSchema = `{"type":"object","properties":{` +
	`"name":{"type":"string","title":"Name","description":"who","minLength":2,"maxLength":5,"default":"ann"},` +
	`"color":{"type":"string","enum":["red","green"]},` +
	`"mail":{"type":"string","format":"email"},` +
	`"n":{"type":"integer","minimum":1,"maximum":10,"default":3},` +
	`"x":{"type":"number","minimum":-1.5,"maximum":1e2},` +
	`"ok":{"type":"boolean","default":false}},` +
	`"required":["name","ok"]}`

func TestCheckQuestionSchema(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		field  string // "" with ok
		ok     bool
	}{
		{name: "every kind of property", schema: flatSchema, ok: true},
		{name: "no properties at all", schema: `{"type":"object","properties":{}}`, ok: true},
		{name: "not an object", schema: `[]`, field: ""},
		{name: "absent", schema: ``, field: ""},
		{name: "type not object", schema: `{"type":"array","properties":{}}`, field: "/type"},
		{name: "no type", schema: `{"properties":{}}`, field: "/type"},
		{name: "no properties", schema: `{"type":"object"}`, field: "/properties"},
		{name: "properties not an object", schema: `{"type":"object","properties":[]}`, field: "/properties"},
		{name: "a member of its own at the top", schema: `{"type":"object","properties":{},"additionalProperties":false}`, field: "/additionalProperties"},
		{name: "a nested object", schema: `{"type":"object","properties":{"a":{"type":"object"}}}`, field: "/properties/a/type"},
		{name: "an array", schema: `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`, field: "/properties/a/type"},
		{name: "a type list", schema: `{"type":"object","properties":{"a":{"type":["string","null"]}}}`, field: "/properties/a/type"},
		{name: "a property not an object", schema: `{"type":"object","properties":{"a":true}}`, field: "/properties/a"},
		{name: "a $ref", schema: `{"type":"object","properties":{"a":{"$ref":"#/x"}}}`, field: "/properties/a/type"},
		{name: "enum on a number", schema: `{"type":"object","properties":{"a":{"type":"number","enum":[1]}}}`, field: "/properties/a/enum"},
		{name: "pattern on a string", schema: `{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}`, field: "/properties/a/pattern"},
		{name: "an empty enum", schema: `{"type":"object","properties":{"a":{"type":"string","enum":[]}}}`, field: "/properties/a/enum"},
		{name: "an enum of numbers", schema: `{"type":"object","properties":{"a":{"type":"string","enum":[1]}}}`, field: "/properties/a/enum"},
		{name: "a repeated enum value", schema: `{"type":"object","properties":{"a":{"type":"string","enum":["x","x"]}}}`, field: "/properties/a/enum/1"},
		{name: "an unknown format", schema: `{"type":"object","properties":{"a":{"type":"string","format":"ipv4"}}}`, field: "/properties/a/format"},
		{name: "a negative minLength", schema: `{"type":"object","properties":{"a":{"type":"string","minLength":-1}}}`, field: "/properties/a/minLength"},
		{name: "a fractional maxLength", schema: `{"type":"object","properties":{"a":{"type":"string","maxLength":1.5}}}`, field: "/properties/a/maxLength"},
		{name: "maxLength under minLength", schema: `{"type":"object","properties":{"a":{"type":"string","minLength":3,"maxLength":2}}}`, field: "/properties/a/maxLength"},
		{name: "a minimum not a number", schema: `{"type":"object","properties":{"a":{"type":"integer","minimum":"1"}}}`, field: "/properties/a/minimum"},
		{name: "a huge exponent", schema: `{"type":"object","properties":{"a":{"type":"number","minimum":1e999999999}}}`, field: "/properties/a/minimum"},
		{name: "maximum under minimum", schema: `{"type":"object","properties":{"a":{"type":"number","minimum":2,"maximum":1}}}`, field: "/properties/a/maximum"},
		{name: "a title not a string", schema: `{"type":"object","properties":{"a":{"type":"boolean","title":1}}}`, field: "/properties/a/title"},
		{name: "a default of another type", schema: `{"type":"object","properties":{"a":{"type":"boolean","default":"yes"}}}`, field: "/properties/a/default"},
		{name: "a default outside the enum", schema: `{"type":"object","properties":{"a":{"type":"string","enum":["x"],"default":"y"}}}`, field: "/properties/a/default"},
		{name: "required not strings", schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":[1]}`, field: "/required"},
		{name: "required names no property", schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`, field: "/required/0"},
		{name: "required twice", schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a","a"]}`, field: "/required/1"},
		{name: "a property name to escape", schema: `{"type":"object","properties":{"a/b":{"type":"null"}}}`, field: "/properties/a~1b/type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := schema.CheckQuestionSchema(json.RawMessage(tc.schema))
			if tc.ok {
				if err != nil {
					t.Errorf("CheckQuestionSchema(%s) = %v, want nil", tc.schema, err)
				}
				return
			}
			var fe *schema.FieldError
			if !errors.Is(err, schema.ErrBadQuestion) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("CheckQuestionSchema(%s) = %v, want %v naming %q", tc.schema, err, schema.ErrBadQuestion, tc.field)
			}
		})
	}
}

func TestCheckAnswerContent(t *testing.T) {
	tests := []struct {
		name    string
		content string
		field   string
		ok      bool
	}{
		{name: "all members", content: `{"name":"bob","color":"red","mail":"not checked","n":10,"x":-1.5,"ok":true}`, ok: true},
		{name: "required only", content: `{"name":"ü漢字","ok":false}`, ok: true},
		{name: "an integer with a zero fraction", content: `{"name":"bob","ok":true,"n":2.0}`, ok: true},
		{name: "not an object", content: `["bob"]`, field: ""},
		{name: "not JSON", content: `{"name":`, field: ""},
		{name: "a required member missing", content: `{"name":"bob"}`, field: "/ok"},
		{name: "a member of no property", content: `{"name":"bob","ok":true,"extra":1}`, field: "/extra"},
		{name: "a string too short", content: `{"name":"b","ok":true}`, field: "/name"},
		{name: "a string too long in characters", content: `{"name":"üüüüüü","ok":true}`, field: "/name"},
		{name: "not in the enum", content: `{"name":"bob","ok":true,"color":"blue"}`, field: "/color"},
		{name: "a string for a boolean", content: `{"name":"bob","ok":"true"}`, field: "/ok"},
		{name: "null for a string", content: `{"name":null,"ok":true}`, field: "/name"},
		{name: "a fraction for an integer", content: `{"name":"bob","ok":true,"n":2.5}`, field: "/n"},
		{name: "under the minimum", content: `{"name":"bob","ok":true,"n":0}`, field: "/n"},
		{name: "over the maximum", content: `{"name":"bob","ok":true,"x":100.0001}`, field: "/x"},
		{name: "a number as a string", content: `{"name":"bob","ok":true,"x":"1"}`, field: "/x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := schema.CheckAnswerContent(json.RawMessage(flatSchema), json.RawMessage(tc.content))
			if tc.ok {
				if err != nil {
					t.Errorf("CheckAnswerContent(%s) = %v, want nil", tc.content, err)
				}
				return
			}
			var fe *schema.FieldError
			if !errors.Is(err, schema.ErrBadAnswer) || !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("CheckAnswerContent(%s) = %v, want %v naming %q", tc.content, err, schema.ErrBadAnswer, tc.field)
			}
		})
	}
	if err := schema.CheckAnswerContent(json.RawMessage(`{"type":"object"}`), json.RawMessage(`{}`)); !errors.Is(err, schema.ErrBadQuestion) {
		t.Errorf("CheckAnswerContent with a bad schema = %v, want %v", err, schema.ErrBadQuestion)
	}
}

func TestQuestionValidate(t *testing.T) {
	ok := json.RawMessage(`{"type":"object","properties":{}}`)
	tests := []struct {
		name string
		q    schema.Question
		ok   bool
	}{
		{name: "valid", q: schema.Question{ID: "q-1_A", Message: "go?", Schema: ok}, ok: true},
		{name: "no id", q: schema.Question{Message: "go?", Schema: ok}},
		{name: "an id with a dot", q: schema.Question{ID: "a.b", Message: "go?", Schema: ok}},
		{name: "an id too long", q: schema.Question{ID: strings.Repeat("a", schema.MaxQuestionIDBytes+1), Message: "go?", Schema: ok}},
		{name: "no message", q: schema.Question{ID: "q", Schema: ok}},
		{name: "a message too long", q: schema.Question{ID: "q", Message: strings.Repeat("x", schema.MaxQuestionMessageBytes+1), Schema: ok}},
		{name: "a message not UTF-8", q: schema.Question{ID: "q", Message: "\xff", Schema: ok}},
		{name: "no schema", q: schema.Question{ID: "q", Message: "go?"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.q.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, schema.ErrBadQuestion)) {
				t.Errorf("Validate(%+v) = %v, want ok %v (else %v)", tc.q, err, tc.ok, schema.ErrBadQuestion)
			}
			_, merr := schema.MarshalQuestion(tc.q)
			if (merr == nil) != tc.ok {
				t.Errorf("MarshalQuestion(%+v) = %v, want ok %v", tc.q, merr, tc.ok)
			}
		})
	}
	// A question whose body would pass MaxQuestionBytes is refused whole.
	big := `{"type":"object","properties":{"a":{"type":"string","description":"` + strings.Repeat("d", schema.MaxQuestionBytes) + `"}}}`
	if _, err := schema.MarshalQuestion(schema.Question{ID: "q", Message: "m", Schema: json.RawMessage(big)}); !errors.Is(err, schema.ErrBadQuestion) {
		t.Errorf("MarshalQuestion of %d bytes = %v, want %v", len(big), err, schema.ErrBadQuestion)
	}
	if _, err := schema.UnmarshalQuestion([]byte(`{"id":"q","message":"m","schema":` + big + `}`)); !errors.Is(err, schema.ErrBadQuestion) {
		t.Errorf("UnmarshalQuestion of a body too long = %v, want %v", err, schema.ErrBadQuestion)
	}
}

func TestSealAndOpenAnswer(t *testing.T) {
	key := schema.NewAskKey()
	const subject = "_INBOX_worker.ask.AAECAwQFBgcICQoLDA0ODw"
	a := schema.Answer{ID: "q1", Action: schema.AskAccept, Content: json.RawMessage(`{"confirmed": true}`)}
	sealed, err := schema.SealAnswer(key, subject, a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.OpenAnswer(key, subject, sealed)
	if err != nil || got.ID != "q1" || got.Action != schema.AskAccept || string(got.Content) != `{"confirmed":true}` {
		t.Errorf("OpenAnswer = %+v, %v, want the answer, its content compacted", got, err)
	}
	again, err := schema.SealAnswer(key, subject, a)
	if err != nil || string(again[:schema.AskNonceBytes]) == string(sealed[:schema.AskNonceBytes]) {
		t.Errorf("two seals share the nonce % x (%v): each takes a fresh one", again[:schema.AskNonceBytes], err)
	}
	flipped := []byte(string(sealed))
	flipped[len(flipped)/2] ^= 1
	plain, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		key     schema.AskKey
		subject string
		body    []byte
	}{
		{name: "another key", key: schema.NewAskKey(), subject: subject, body: sealed},
		{name: "another subject", key: key, subject: subject + "x", body: sealed},
		{name: "a changed byte", key: key, subject: subject, body: flipped},
		{name: "cut", key: key, subject: subject, body: sealed[:len(sealed)-1]},
		{name: "too short to be sealed", key: key, subject: subject, body: sealed[:schema.AskNonceBytes+schema.AskTagBytes-1]},
		{name: "empty", key: key, subject: subject},
		{name: "not sealed", key: key, subject: subject, body: plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := schema.OpenAnswer(tc.key, tc.subject, tc.body); !errors.Is(err, schema.ErrBadAnswer) {
				t.Errorf("OpenAnswer = %+v, %v, want %v", got, err, schema.ErrBadAnswer)
			}
		})
	}
	for _, bad := range []schema.Answer{
		{ID: "q1", Action: schema.AskAccept},
		{ID: "q1", Action: schema.AskAccept, Content: json.RawMessage(`[true]`)},
		{ID: "q1", Action: schema.AskDecline, Content: json.RawMessage(`{}`)},
		{ID: "q1", Action: "maybe"},
		{ID: "", Action: schema.AskCancel},
	} {
		if _, err := schema.SealAnswer(key, subject, bad); !errors.Is(err, schema.ErrBadAnswer) {
			t.Errorf("SealAnswer(%+v) = %v, want %v", bad, err, schema.ErrBadAnswer)
		}
	}
}

func TestParseAskKey(t *testing.T) {
	k := schema.NewAskKey()
	if got, err := schema.ParseAskKey(k.String()); err != nil || got != k || len(k.String()) != schema.AskKeyLen {
		t.Errorf("ParseAskKey(%s) = %x, %v, want %x", k, got, err, k)
	}
	if schema.NewAskKey() == k {
		t.Error("two keys are the same")
	}
	for _, bad := range []string{"", "short", k.String() + "=", strings.Repeat("*", schema.AskKeyLen), strings.Repeat("A", schema.AskKeyLen-1) + "B"} {
		if _, err := schema.ParseAskKey(bad); !errors.Is(err, schema.ErrBadAskKey) {
			t.Errorf("ParseAskKey(%q) = %v, want %v", bad, err, schema.ErrBadAskKey)
		}
	}
}

func TestCheckAnswerSubject(t *testing.T) {
	const tok = "AAECAwQFBgcICQoLDA0ODw"
	tests := []struct {
		subject string
		ok      bool
	}{
		{"_INBOX_worker.ask." + tok, true},
		{"_INBOX.ask." + tok, true},
		{"_INBOX_worker_math.ask." + tok, true},
		{"_INBOX_worker.x.y.ask." + tok, true},
		{"toolbus.call.echo.ask." + tok, false},
		{"$KV.toolbus_jobs.ask." + tok, false},
		{"toolbus.jobs.reply.r.ask." + tok, false},
		{"_INBOX_worker.ask.short", false},
		{"_INBOX_worker.ask." + tok + "x", false},
		{"_INBOX_worker.ask", false},
		{"ask." + tok, false},
		{"_INBOX_worker.*.ask." + tok, false},
		{"_INBOX_worker.>.ask." + tok, false},
		{"_INBOX_worker..ask." + tok, false},
		{"_INBOX_worker.a b.ask." + tok, false},
		{"_INBOX_worker.reply." + tok, false},
		{"_INBOX_worker." + strings.Repeat("a", schema.MaxAnswerSubjectBytes) + ".ask." + tok, false},
	}
	for _, tc := range tests {
		err := schema.CheckAnswerSubject(tc.subject)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, schema.ErrBadAnswerSubject)) {
			t.Errorf("CheckAnswerSubject(%q) = %v, want ok %v", tc.subject, err, tc.ok)
		}
	}
	if got := schema.AnswerSubject("_INBOX_worker", tok); schema.CheckAnswerSubject(got) != nil {
		t.Errorf("AnswerSubject = %q, which CheckAnswerSubject refuses", got)
	}
}

// FuzzAsk: whatever bytes come as a question, a schema, content or a
// sealed answer, the readers return.
func FuzzAsk(f *testing.F) {
	f.Add([]byte(`{"id":"q1","message":"go?","schema":`+flatSchema+`}`), []byte(`{"name":"bob","ok":true}`))
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"number","minimum":1e400}}}`), []byte(`{"a":1e-400}`))
	f.Add([]byte(`[[[[`), []byte(`{"a":`))
	key := schema.NewAskKey()
	f.Fuzz(func(t *testing.T, a, b []byte) {
		_, _ = schema.UnmarshalQuestion(a)
		_ = schema.CheckQuestionSchema(a)
		_ = schema.CheckAnswerContent(a, b)
		_ = schema.CheckAnswerContent(json.RawMessage(flatSchema), b)
		_, _ = schema.OpenAnswer(key, "_INBOX.ask.x", a)
		_ = schema.CheckAnswerSubject(string(a))
	})
}
