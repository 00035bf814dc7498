package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestFanOut(t *testing.T) {
	tests := []struct {
		name    string
		fake    fakeToolbus
		wantErr error
	}{
		{"every id answered", fakeToolbus{}, nil},
		{"missing id", fakeToolbus{drop: "7"}, ErrMissingID},
		{"duplicate id", fakeToolbus{dup: "3"}, ErrDuplicateID},
		{"wrong result", fakeToolbus{alter: "20"}, ErrWrongAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := FanOut(t.Context(), FanOutConfig{
				URL:     serve(t, tt.fake) + "/rpc",
				Calls:   20,
				Sleep:   5 * time.Millisecond,
				Repeats: 3,
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("FanOut() error = %v, want %v", err, tt.wantErr)
			}
			if res.Calls != 20 || res.Ideal != 5*time.Millisecond {
				t.Errorf("Calls, Ideal = %d, %v, want 20, 5ms", res.Calls, res.Ideal)
			}
			if len(res.Walls) != 3 {
				t.Fatalf("len(Walls) = %d, want 3", len(res.Walls))
			}
			if !(0 < res.Min && res.Min <= res.Median && res.Median <= res.Max) {
				t.Errorf("Min, Median, Max = %v, %v, %v, want ordered and positive", res.Min, res.Median, res.Max)
			}
			wantFailures := 0
			if tt.wantErr != nil {
				wantFailures = 3
			}
			if len(res.Failures) != wantFailures {
				t.Errorf("Failures = %v, want %d", res.Failures, wantFailures)
			}
		})
	}
}

func TestSlowBackend(t *testing.T) {
	tests := []struct {
		name    string
		fake    fakeToolbus
		sleep   time.Duration
		wantErr error
	}{
		{"timeout and every echo", fakeToolbus{}, 10 * time.Second, nil},
		{"deadline ignored", fakeToolbus{ignoreTimeout: true}, 60 * time.Millisecond, ErrWrongAnswer},
		{"missing echo", fakeToolbus{drop: "5"}, 10 * time.Second, ErrMissingID},
		{"missing timeout", fakeToolbus{drop: "1"}, 10 * time.Second, ErrMissingID},
		{"duplicate echo", fakeToolbus{dup: "2"}, 10 * time.Second, ErrDuplicateID},
		{"wrong echo", fakeToolbus{alter: "10"}, 10 * time.Second, ErrWrongAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := SlowBackend(t.Context(), SlowConfig{
				URL:     serve(t, tt.fake) + "/rpc",
				Sleep:   tt.sleep,
				Timeout: 30 * time.Millisecond,
				Repeats: 2,
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("SlowBackend() error = %v, want %v", err, tt.wantErr)
			}
			if res.Echoes != 9 || res.Timeout != 30*time.Millisecond || res.Sleep != tt.sleep {
				t.Errorf("Echoes, Timeout, Sleep = %d, %v, %v, want 9, 30ms, %v", res.Echoes, res.Timeout, res.Sleep, tt.sleep)
			}
			if len(res.Walls) != 2 {
				t.Errorf("len(Walls) = %d, want 2", len(res.Walls))
			}
		})
	}
}

func TestSlowBackendAgainstPlainEcho(t *testing.T) {
	// PlainEcho takes no batches: it answers one error object, not an array.
	res, err := SlowBackend(t.Context(), SlowConfig{URL: serve(t, PlainEcho()), Repeats: 1})
	if !errors.Is(err, ErrNotJSONRPC) {
		t.Errorf("SlowBackend() error = %v, want %v", err, ErrNotJSONRPC)
	}
	if len(res.Failures) != 1 {
		t.Errorf("Failures = %v, want one", res.Failures)
	}
}

func TestVerify(t *testing.T) {
	want := []expectation{
		{id: []byte("1"), check: errorCode(schema.CodeTimeout)},
		{id: []byte(`"a"`), check: resultEqual([]byte(`{"x":[1,2]}`))},
	}
	tests := []struct {
		name    string
		body    string
		wantErr error
	}{
		{"right", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1},{"jsonrpc":"2.0","result":{ "x" : [1, 2] },"id":"a"}]`, nil},
		{"any order", `[{"jsonrpc":"2.0","result":{"x":[1,2]},"id":"a"},{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1}]`, nil},
		{"string id for number", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":"1"},{"jsonrpc":"2.0","result":{"x":[1,2]},"id":"a"}]`, ErrUnknownID},
		{"null id", `[{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid"},"id":null}]`, ErrUnknownID},
		{"result for a timeout", `[{"jsonrpc":"2.0","result":{},"id":1},{"jsonrpc":"2.0","result":{"x":[1,2]},"id":"a"}]`, ErrWrongAnswer},
		{"other code", `[{"jsonrpc":"2.0","error":{"code":-32603,"message":"internal"},"id":1},{"jsonrpc":"2.0","result":{"x":[1,2]},"id":"a"}]`, schema.ErrInternal},
		{"error for a result", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1},{"jsonrpc":"2.0","error":{"code":2001,"message":"business"},"id":"a"}]`, &schema.Error{Code: 2001}},
		{"no result", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1},{"jsonrpc":"2.0","id":"a"}]`, ErrWrongAnswer},
		{"missing", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1}]`, ErrMissingID},
		{"empty array", `[]`, ErrMissingID},
		{"duplicate", `[{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1},{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out"},"id":1}]`, ErrDuplicateID},
		{"object for a batch", `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid"},"id":null}`, ErrNotJSONRPC},
		{"not JSON", `<html>`, ErrNotJSONRPC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verify([]byte(tt.body), true, want)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("verify(%s) = %v, want %v", tt.body, err, tt.wantErr)
			}
		})
	}
}
