package schema

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden envelopes in testdata")

// goldenCall and goldenReply are the vectors PROTOCOL.md shows byte by byte.
var (
	goldenCall = []struct {
		file string
		env  CallEnvelope
	}{
		{"call.msgpack", CallEnvelope{Version: 1, ID: []byte(`"42"`), Method: "subtract", Params: []byte(`[42,23]`), Caller: "alice"}},
		{"notification.msgpack", CallEnvelope{Version: 1, Method: "notify_hello", Params: []byte(`[7]`)}},
	}
	goldenReply = []struct {
		file string
		env  *ReplyEnvelope
	}{
		{"reply_result.msgpack", ReplyResult([]byte(`19`))},
		{"reply_error.msgpack", ReplyError(NewError(CodeTimeout, "timed out", map[string]any{"retryable": true}))},
	}
)

// TestGolden compares the encoding of each vector with its file in testdata
// byte for byte (go test -run TestGolden -update rewrites them), decodes
// each file, and reads it with a general msgpack decoder too, as a worker in
// another language would.
func TestGolden(t *testing.T) {
	for _, g := range goldenCall {
		t.Run(g.file, func(t *testing.T) {
			b, err := MarshalCall(&g.env)
			if err != nil {
				t.Fatal(err)
			}
			want := golden(t, g.file, b)
			got, err := UnmarshalCall(want)
			if err != nil || !reflect.DeepEqual(*got, g.env) {
				t.Errorf("UnmarshalCall(%s) = %+v, %v, want %+v", g.file, got, err, g.env)
			}
			checkGeneric(t, want)
		})
	}
	for _, g := range goldenReply {
		t.Run(g.file, func(t *testing.T) {
			b, err := MarshalReply(g.env)
			if err != nil {
				t.Fatal(err)
			}
			want := golden(t, g.file, b)
			got, err := UnmarshalReply(want)
			if err != nil || !reflect.DeepEqual(got, g.env) {
				t.Errorf("UnmarshalReply(%s) = %+v, %v, want %+v", g.file, got, err, g.env)
			}
			checkGeneric(t, want)
		})
	}
}

// golden returns the bytes of testdata/file after checking that got equals
// them, or writes got there under -update.
func golden(t *testing.T, file string, got []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encoding = %s, want %s (%s)", hex.EncodeToString(got), hex.EncodeToString(want), path)
	}
	return want
}

// checkGeneric decodes b with a general msgpack decoder and checks that it
// is a map with the version key and raw JSON as bin.
func checkGeneric(t *testing.T, b []byte) {
	t.Helper()
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatalf("msgpack.Unmarshal(%x) error = %v", b, err)
	}
	if v, ok := m["v"].(int8); !ok || v != EnvelopeVersion {
		t.Errorf("generic decode of %x: v = %#v, want %d", b, m["v"], EnvelopeVersion)
	}
	for _, k := range []string{"id", "params", "result"} {
		if v, ok := m[k]; ok {
			if _, isBin := v.([]byte); !isBin {
				t.Errorf("generic decode of %x: %s = %#v, want bin", b, k, v)
			}
		}
	}
}

// TestGoldenProgressReport checks the body of a progress report
// (ProgressReport) against testdata/progress_report.json, which
// PROTOCOL.md shows.
func TestGoldenProgressReport(t *testing.T) {
	want := golden(t, "progress_report.json", MarshalProgress(42.5, "halfway"))
	got, err := UnmarshalProgress(want)
	if err != nil || got != (JobProgress{Percent: 42.5, Message: "halfway"}) {
		t.Errorf("UnmarshalProgress(%s) = %+v, %v, want {42.5 halfway}", want, got, err)
	}
}

func TestUnmarshalProgress(t *testing.T) {
	long := `"` + strings.Repeat("x", MaxProgressMessageBytes+1) + `"`
	tests := []struct {
		name string
		body string
		want JobProgress
		ok   bool
	}{
		{name: "percent only", body: `{"percent":10}`, want: JobProgress{Percent: 10}, ok: true},
		{name: "unknown member", body: `{"percent":100,"message":"done","eta_ms":5}`, want: JobProgress{Percent: 100, Message: "done"}, ok: true},
		{name: "empty", body: ``},
		{name: "not an object", body: `[1]`},
		{name: "no percent", body: `{"message":"x"}`},
		{name: "percent a string", body: `{"percent":"10"}`},
		{name: "percent negative", body: `{"percent":-1}`},
		{name: "percent over 100", body: `{"percent":100.5}`},
		{name: "message not a string", body: `{"percent":1,"message":3}`},
		{name: "message too long", body: `{"percent":1,"message":` + long + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := UnmarshalProgress([]byte(tc.body))
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("UnmarshalProgress(%q) = %+v, %v, want %+v (ok %v)", tc.body, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestMarshalProgressClamps(t *testing.T) {
	tests := []struct {
		percent float64
		want    string
	}{
		{math.NaN(), `{"percent":0}`},
		{-3, `{"percent":0}`},
		{250, `{"percent":100}`},
		{7.25, `{"percent":7.25}`},
	}
	for _, tc := range tests {
		if got := string(MarshalProgress(tc.percent, "")); got != tc.want {
			t.Errorf("MarshalProgress(%v, \"\") = %s, want %s", tc.percent, got, tc.want)
		}
	}
}

// The question and the sealed answer PROTOCOL.md shows byte by byte
// (rule 11): the key is the bytes 00 to 1f, the nonce a0 to ab, and the
// answer subject that of the asking worker.
var (
	goldenAskKey      = AskKey{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}
	goldenNonce       = [AskNonceBytes]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab}
	goldenAskSubject  = "_INBOX_worker.ask.AAECAwQFBgcICQoLDA0ODw"
	goldenQuestion    = Question{ID: "q1", Message: "proceed with deploy?", Schema: json.RawMessage(`{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`)}
	goldenAnswer      = Answer{ID: "q1", Action: AskAccept, Content: json.RawMessage(`{"confirmed":true}`)}
	goldenAskKeyValue = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
)

// TestGoldenQuestion checks the body of a question message against
// testdata/question.json.
func TestGoldenQuestion(t *testing.T) {
	b, err := MarshalQuestion(goldenQuestion)
	if err != nil {
		t.Fatal(err)
	}
	want := golden(t, "question.json", b)
	got, err := UnmarshalQuestion(want)
	if err != nil || !reflect.DeepEqual(got, goldenQuestion) {
		t.Errorf("UnmarshalQuestion(%s) = %+v, %v, want %+v", want, got, err, goldenQuestion)
	}
}

// TestGoldenAnswer checks the plaintext of an answer against
// testdata/answer.json and its sealed body against testdata/answer.sealed,
// opens the file, and opens it again with AES-GCM alone, as a worker in
// another language would.
func TestGoldenAnswer(t *testing.T) {
	if got := goldenAskKey.String(); got != goldenAskKeyValue {
		t.Errorf("key header value = %s, want %s", got, goldenAskKeyValue)
	}
	plain, err := marshalNoEscape(goldenAnswer)
	if err != nil {
		t.Fatal(err)
	}
	plain = golden(t, "answer.json", plain)
	sealed, err := sealAnswer(goldenAskKey, goldenNonce, goldenAskSubject, goldenAnswer)
	if err != nil {
		t.Fatal(err)
	}
	want := golden(t, "answer.sealed", sealed)
	got, err := OpenAnswer(goldenAskKey, goldenAskSubject, want)
	if err != nil || !reflect.DeepEqual(got, goldenAnswer) {
		t.Errorf("OpenAnswer(answer.sealed) = %+v, %v, want %+v", got, err, goldenAnswer)
	}
	block, err := aes.NewCipher(goldenAskKey[:])
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := gcm.Open(nil, want[:12], want[12:], []byte(goldenAskSubject))
	if err != nil || !bytes.Equal(opened, plain) {
		t.Errorf("AES-256-GCM open of answer.sealed = %s, %v, want %s", opened, err, plain)
	}
	if !bytes.Equal(want[:12], goldenNonce[:]) || len(want) != 12+len(plain)+16 {
		t.Errorf("answer.sealed is %d bytes starting % x, want the nonce, %d bytes of ciphertext and a 16-byte tag", len(want), want[:12], len(plain))
	}
}
