package bus

import (
	"crypto/rand"
	"encoding/base64"
)

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
