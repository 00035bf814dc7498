package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// TestEncodeResult checks which results the runtime checks before it
// sends them: a tool's json.RawMessage, but neither what json.Marshal
// wrote nor the call's own params handed back, which the ingress checked
// (the params here are not JSON, so that a check would show).
func TestEncodeResult(t *testing.T) {
	params := json.RawMessage(`{"not json`)
	tests := []struct {
		name    string
		v       any
		want    string
		wantErr bool
	}{
		{name: "nil", v: nil, want: `null`},
		{name: "empty raw", v: json.RawMessage{}, want: `null`},
		{name: "raw", v: json.RawMessage(`{"a":1}`), want: `{"a":1}`},
		{name: "raw that is not JSON", v: json.RawMessage(`{"a":`), wantErr: true},
		{name: "the params themselves", v: params, want: string(params)},
		{name: "a copy of the params", v: json.RawMessage(bytes.Clone(params)), wantErr: true},
		{name: "part of the params", v: params[:5], wantErr: true},
		{name: "marshalled", v: map[string]int{"a": 1}, want: `{"a":1}`},
		{name: "unencodable", v: make(chan int), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeResult(tc.v, params)
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Errorf("encodeResult(%s) = %s, %v, want %s (error %v)", tc.name, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestHeldAttemptsOfOneCall tracks three attempts of one bus call, ends
// them in another order than they came, and checks after each end that a
// cancel message would reach exactly the attempts still held, and that
// the call leaves the table with its last attempt.
func TestHeldAttemptsOfOneCall(t *testing.T) {
	rt := &Runtime{}
	msg := &nats.Msg{Header: nats.Header{}}
	msg.Header.Set(schema.HeaderCallID, "call-1")
	attempts := make([]*held, 3)
	for i := range attempts {
		h := &held{rt: rt}
		_, h.cancel = context.WithCancelCause(context.Background())
		rt.track(msg, h)
		attempts[i] = h
	}
	heldNow := func() []*held {
		var out []*held
		for h := rt.calls["call-1"]; h != nil; h = h.next {
			out = append(out, h)
		}
		return out
	}
	for _, step := range []struct {
		end  int
		left []int
	}{{end: 1, left: []int{2, 0}}, {end: 2, left: []int{0}}, {end: 0, left: nil}} {
		attempts[step.end].end()
		got := heldNow()
		if len(got) != len(step.left) {
			t.Fatalf("after attempt %d ended, %d attempts are held, want %d", step.end, len(got), len(step.left))
		}
		for i, j := range step.left {
			if got[i] != attempts[j] {
				t.Errorf("after attempt %d ended, held attempt %d is not attempt %d", step.end, i, j)
			}
		}
	}
	if _, ok := rt.calls["call-1"]; ok {
		t.Error("the call is still in the table after its last attempt ended")
	}
	attempts[0].end() // a second end changes nothing
	if len(rt.calls) != 0 {
		t.Errorf("the table holds %d calls after a second end, want none", len(rt.calls))
	}
}
