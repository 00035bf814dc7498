package webhook_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/webhook"
)

func TestVerify(t *testing.T) {
	body := []byte(`{"id":"01j","state":"succeeded"}`)
	now := time.Unix(1_800_000_000, 0)
	header := func(ts, sig string) http.Header {
		h := http.Header{}
		if ts != "" {
			h.Set(testHMAC.TimestampHeader, ts)
		}
		if sig != "" {
			h.Set(testHMAC.SignatureHeader, sig)
		}
		return h
	}
	at := func(d time.Duration) (string, string) {
		ts := now.Add(d).Unix()
		return strconv.FormatInt(ts, 10), testHMAC.Signature(ts, body)
	}
	tsNow, sigNow := at(0)
	tsOld, sigOld := at(-6 * time.Minute)
	tsAhead, sigAhead := at(4 * time.Minute)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"fresh", header(tsNow, sigNow), body, nil},
		{"a little ahead", header(tsAhead, sigAhead), body, nil},
		{"one of several signatures", header(tsNow, "v1=00ff,"+sigNow), body, nil},
		{"replayed after the window", header(tsOld, sigOld), body, webhook.ErrStale},
		{"old timestamp with a fresh one's signature", header(tsOld, sigNow), body, webhook.ErrSignature},
		{"body changed", header(tsNow, sigNow), []byte(`{"id":"01j","state":"failed"}`), webhook.ErrSignature},
		{"signature of the body alone", header(tsNow, "sha256="+strings.TrimPrefix(testHMAC.Signature(0, body), "v1=")), body, webhook.ErrSignature},
		{"other secret", header(tsNow, sigNow[:len(sigNow)-2]+"00"), body, webhook.ErrSignature},
		{"no timestamp", header("", sigNow), body, webhook.ErrSignature},
		{"timestamp not a number", header("soon", sigNow), body, webhook.ErrSignature},
		{"timestamp with a leading zero", header("0"+tsNow, sigNow), body, webhook.ErrSignature},
		{"no signature", header(tsNow, ""), body, webhook.ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := testHMAC.Verify(tc.h, tc.body, now, 5*time.Minute)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func ExampleHMAC() {
	m := webhook.HMAC{Secret: []byte("0123456789abcdef-secret"), SignatureHeader: "Toolbus-Signature", TimestampHeader: "Toolbus-Timestamp"}
	body := []byte(`{"id":"01j","state":"succeeded"}`)
	sent := time.Unix(1_800_000_000, 0)

	h := http.Header{}
	m.Sign(h, body, sent)
	fmt.Println(h.Get("Toolbus-Timestamp"))
	fmt.Println(h.Get("Toolbus-Signature"))
	// A receiver checks it on arrival, and a replay later is refused.
	fmt.Println(m.Verify(h, body, sent.Add(2*time.Second), 5*time.Minute))
	fmt.Println(errors.Is(m.Verify(h, body, sent.Add(time.Hour), 5*time.Minute), webhook.ErrStale))
	// Output:
	// 1800000000
	// v1=c9f858461f98f1451cff9c29a30a209edca21705682f3842ff2b783a277f803e
	// <nil>
	// true
}
