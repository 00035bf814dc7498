package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signer adds to an attempt's headers what lets its receiver trust it.
// It is called for every attempt, with the body and the time the attempt
// is sent, so that each attempt is signed afresh.
type Signer interface {
	Sign(h http.Header, body []byte, at time.Time)
}

// Errors of [HMAC.Verify], which wraps one of them with the detail.
var (
	// ErrSignature: the signature or timestamp header is missing or
	// malformed, or the signature does not match.
	ErrSignature = errors.New("webhook: the signature is not valid")
	// ErrStale: the timestamp is outside the replay window.
	ErrStale = errors.New("webhook: the timestamp is outside the replay window")
)

// HMAC signs as job callbacks are signed: TimestampHeader holds the time
// the attempt is sent, in Unix seconds, and SignatureHeader "v1=" and the
// lower-case hex HMAC-SHA256, under Secret, of the timestamp, a dot and
// the raw body ([HMAC.Signature]). Its zero value is not usable: every
// field must be set.
type HMAC struct {
	Secret          []byte
	SignatureHeader string
	TimestampHeader string
}

var _ Signer = HMAC{}

// Sign sets m's two headers for body sent at at.
func (m HMAC) Sign(h http.Header, body []byte, at time.Time) {
	ts := at.Unix()
	h.Set(m.TimestampHeader, strconv.FormatInt(ts, 10))
	h.Set(m.SignatureHeader, m.Signature(ts, body))
}

// Signature returns the value of SignatureHeader for body sent at
// timestamp (Unix seconds, the value of TimestampHeader):
// "v1=" + hex(HMAC-SHA256(Secret, timestamp + "." + body)).
func (m HMAC) Signature(timestamp int64, body []byte) string {
	return "v1=" + hex.EncodeToString(m.mac(strconv.FormatInt(timestamp, 10), body))
}

func (m HMAC) mac(timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, m.Secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Verify checks a delivery as its receiver got it: h its headers, body
// its raw body, now the receiver's clock. It accepts it when a v1
// signature of SignatureHeader (a comma-separated list is accepted)
// matches, compared in constant time, and the timestamp is within window
// of now. It returns an error wrapping [ErrSignature] or [ErrStale]
// otherwise.
func (m HMAC) Verify(h http.Header, body []byte, now time.Time, window time.Duration) error {
	ts := h.Get(m.TimestampHeader)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return fmt.Errorf("%w: the %s header %q is not Unix seconds", ErrSignature, m.TimestampHeader, ts)
	}
	want := m.mac(ts, body)
	matched := false
	for sig := range strings.SplitSeq(h.Get(m.SignatureHeader), ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(sig), "v1=")
		got, err := hex.DecodeString(v)
		if ok && err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature in the %s header matches the timestamp and body under the secret", ErrSignature, m.SignatureHeader)
	}
	if d := now.Sub(time.Unix(sec, 0)).Abs(); d > window {
		return fmt.Errorf("%w: signed %v from now, more than %v", ErrStale, d.Round(time.Second), window)
	}
	return nil
}
