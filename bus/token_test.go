package bus_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"testing/cryptotest"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// decodeToken returns the bytes a reply token encodes, failing t when it
// is not ReplyTokenBytes bytes of unpadded base64url.
func decodeToken(t testing.TB, tok string) [bus.ReplyTokenBytes]byte {
	t.Helper()
	var raw [bus.ReplyTokenBytes]byte
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != len(raw) {
		t.Fatalf("ReplyToken() = %q, decodes to %d bytes (err %v), want %d bytes of unpadded base64url", tok, len(b), err, len(raw))
	}
	copy(raw[:], b)
	return raw
}

// A reply token is the first 128 bits crypto/rand gives, and nothing
// else: with crypto/rand made deterministic, it encodes exactly the bytes
// a read of the same seed returns.
func TestReplyTokenIsFromCryptoRand(t *testing.T) {
	for _, seed := range []uint64{1, 2, 0xfeed} {
		cryptotest.SetGlobalRandom(t, seed)
		var want [bus.ReplyTokenBytes]byte
		rand.Read(want[:])
		cryptotest.SetGlobalRandom(t, seed)
		tok := bus.ReplyToken()
		if got := decodeToken(t, tok); !bytes.Equal(got[:], want[:]) {
			t.Fatalf("seed %d: ReplyToken() = %q = %x, want the 16 bytes of crypto/rand %x", seed, tok, got, want)
		}
	}
}

// A reply token is one subject token of the method grammar: no dot, no
// wildcard, 22 characters of A-Z a-z 0-9 - _.
func TestReplyTokenCharacters(t *testing.T) {
	for range 1000 {
		tok := bus.ReplyToken()
		if len(tok) != bus.ReplyTokenLen {
			t.Fatalf("len(ReplyToken()) = %d (%q), want %d", len(tok), tok, bus.ReplyTokenLen)
		}
		if strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("ReplyToken() = %q, want only A-Z a-z 0-9 - _", tok)
		}
		if err := schema.ValidateMethod(tok); err != nil {
			t.Fatalf("ValidateMethod(%q) = %v, want nil", tok, err)
		}
	}
}

// A million reply tokens are all different, and so are their first
// halves: tokens that counted up (as a NUID's last characters do) would
// share their beginnings. Two random halves of 64 bits meet among a
// million with a chance of about 3e-8.
func TestReplyTokensDistinct(t *testing.T) {
	const n = 1_000_000
	seen := make(map[[bus.ReplyTokenBytes]byte]struct{}, n)
	halves := make(map[[bus.ReplyTokenBytes / 2]byte]struct{}, n)
	for i := range n {
		tok := bus.ReplyToken()
		raw := decodeToken(t, tok)
		if _, ok := seen[raw]; ok {
			t.Fatalf("token %d, %q, was made before", i, tok)
		}
		seen[raw] = struct{}{}
		half := [bus.ReplyTokenBytes / 2]byte(raw[:bus.ReplyTokenBytes/2])
		if _, ok := halves[half]; ok {
			t.Fatalf("token %d, %q, begins as one made before (%x): the tokens are not independent", i, tok, half)
		}
		halves[half] = struct{}{}
	}
}

// BenchmarkReplyToken measures one token: it runs for every call that
// waits for an answer.
func BenchmarkReplyToken(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		bus.ReplyToken()
	}
}
