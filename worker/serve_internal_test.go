package worker

import (
	"bytes"
	"encoding/json"
	"testing"
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
