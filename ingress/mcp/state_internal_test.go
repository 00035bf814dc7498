package mcp

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestStateSigner(t *testing.T) {
	s := stateSigner{key: []byte("a key of sixteen bytes or more")}
	want := requestState{Tool: "confirm", Job: "j-1", Question: "q-1"}
	signed := s.sign(want)
	if got, err := s.open(signed); err != nil || got != want {
		t.Fatalf("open(sign(%+v)) = %+v, %v, want it back", want, got, err)
	}
	version, rest, _ := strings.Cut(signed, ".")
	_, mac, _ := strings.Cut(rest, ".")
	content := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	unsigned := func(body string) string { return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body)) }
	for _, tc := range []struct{ name, raw string }{
		{"empty", ""},
		{"no dots", "garbage"},
		{"another version", "v2." + rest},
		{"another key", stateSigner{key: []byte("another key of sixteen bytes")}.sign(want)},
		{"another job under the signature", version + "." + content(`{"tool":"confirm","job":"j-2","question":"q-1"}`) + "." + mac},
		{"no signature", version + "." + content(`{"tool":"confirm","job":"j-1","question":"q-1"}`) + "."},
		{"signature not base64", strings.TrimSuffix(signed, mac) + "!!"},
		{"signed, not JSON", unsigned("v1." + content("not json"))},
		{"signed, no job", unsigned("v1." + content(`{"tool":"confirm","question":"q-1"}`))},
	} {
		if got, err := s.open(tc.raw); err == nil {
			t.Errorf("%s: open(%q) = %+v, want an error", tc.name, tc.raw, got)
		}
	}
}

// FuzzOpenState checks that any request state a client sends is opened
// or refused, never more, and that what opens is what was signed.
func FuzzOpenState(f *testing.F) {
	s := stateSigner{key: []byte("a key of sixteen bytes or more")}
	f.Add(s.sign(requestState{Tool: "confirm", Job: "j-1", Question: "q-1"}))
	f.Add("v1..")
	f.Add("v1.e30.")
	f.Add("...")
	f.Fuzz(func(t *testing.T, raw string) {
		st, err := s.open(raw)
		if err == nil && s.sign(st) != raw {
			t.Errorf("open(%q) = %+v, which signs as %q", raw, st, s.sign(st))
		}
	})
}
