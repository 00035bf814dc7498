package mcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// MinRequestStateKeyBytes is the shortest key [WithRequestStateKey]
// takes.
const MinRequestStateKeyBytes = 16

// stateVersion opens every request state this front door issues, so that
// a later form can tell its own from these.
const stateVersion = "v1"

// requestState is what the front door needs, on a client's retry of a
// tools/call at the newest revision, to resume the job that asked: the
// tool the call was of, the job, and the question the input request put.
// It travels to the client and back as the result's and the retry's
// requestState, signed ([stateSigner]), so that any replica whose key is
// the same resumes the job, and a client can change none of it.
type requestState struct {
	Tool     string `json:"tool"`
	Job      string `json:"job"`
	Question string `json:"question"`
}

// stateSigner signs and opens request states with an HMAC-SHA256 key.
type stateSigner struct{ key []byte }

// newStateKey returns a random key, the default of a front door that was
// given none: its states resume on this process alone.
func newStateKey() []byte {
	k := make([]byte, 32)
	rand.Read(k) // never fails
	return k
}

// sign returns st as a request state: "v1.", the base64url of its JSON, a
// dot and the base64url of the HMAC of what precedes it.
func (s stateSigner) sign(st requestState) string {
	b, _ := json.Marshal(st)
	body := stateVersion + "." + base64.RawURLEncoding.EncodeToString(b)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
}

func (s stateSigner) mac(body string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(body))
	return h.Sum(nil)
}

// open returns the request state raw stands for, or an error that says
// why it cannot be trusted: it is not of this front door's form, its
// signature does not match, or its content is not a request state.
func (s stateSigner) open(raw string) (requestState, error) {
	var st requestState
	i := strings.LastIndexByte(raw, '.')
	if i < 0 {
		return st, errors.New("requestState is not of the form this server issues")
	}
	body, sig := raw[:i], raw[i+1:]
	version, payload, ok := strings.Cut(body, ".")
	if !ok || version != stateVersion {
		return st, errors.New("requestState is not of the form this server issues")
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
		return st, errors.New("requestState's signature does not match: it was changed, or a server with another request state key signed it")
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &st) != nil || st.Tool == "" || st.Job == "" || st.Question == "" {
		return requestState{}, errors.New("requestState does not name a tool, a job and a question")
	}
	return st, nil
}
