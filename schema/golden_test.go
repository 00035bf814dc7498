package schema

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
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
