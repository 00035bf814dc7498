package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestLoad(t *testing.T) {
	plain := serve(t, PlainEcho())
	toolbus := serve(t, fakeToolbus{})
	status500 := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	otherID := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","result":{},"id":2}`))
	}))
	notJSON := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`hello`))
	}))
	tests := []struct {
		name    string
		url     string
		body    string
		wantOK  bool
		wantErr error // what FirstError matches; nil when no errors are expected
	}{
		{"plain echo", plain, EchoRequest, true, nil},
		{"batch", toolbus, `[{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},{"jsonrpc":"2.0","id":"b","method":"echo","params":[2]},{"jsonrpc":"2.0","method":"echo"}]`, true, nil},
		{"JSON-RPC error", plain, `{"jsonrpc":"2.0","id":1,"method":"missing"}`, false, schema.ErrMethodNotFound},
		{"HTTP 500", status500, EchoRequest, false, ErrStatus},
		{"other id", otherID, EchoRequest, false, ErrUnknownID},
		{"not JSON", notJSON, EchoRequest, false, ErrNotJSONRPC},
		{"batch with a missing id", serve(t, fakeToolbus{drop: `"b"`}), `[{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},{"jsonrpc":"2.0","id":"b","method":"echo","params":[2]}]`, false, ErrMissingID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Load(t.Context(), LoadConfig{
				URL:         tt.url + "/rpc",
				Body:        []byte(tt.body),
				Concurrency: 4,
				Duration:    100 * time.Millisecond,
				Warmup:      20 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("Load() error = %v, want nil", err)
			}
			if res.Concurrency != 4 {
				t.Errorf("Concurrency = %d, want 4", res.Concurrency)
			}
			if tt.wantOK {
				if res.Requests == 0 || res.Errors != 0 {
					t.Errorf("Requests, Errors = %d, %d (first %v), want some, 0", res.Requests, res.Errors, res.FirstError)
				}
				if res.Throughput <= 0 || res.Elapsed <= 0 {
					t.Errorf("Throughput, Elapsed = %v, %v, want both positive", res.Throughput, res.Elapsed)
				}
				if !(0 < res.P50 && res.P50 <= res.P90 && res.P90 <= res.P99 && res.P99 <= res.Max && res.Mean <= res.Max) {
					t.Errorf("P50, P90, P99, Max, Mean = %v, %v, %v, %v, %v, want ordered and positive", res.P50, res.P90, res.P99, res.Max, res.Mean)
				}
				return
			}
			if res.Requests != 0 || res.Errors == 0 {
				t.Errorf("Requests, Errors = %d, %d, want 0, some", res.Requests, res.Errors)
			}
			if res.Throughput != 0 || res.Max != 0 {
				t.Errorf("Throughput, Max = %v, %v, want 0, 0", res.Throughput, res.Max)
			}
			if !errors.Is(res.FirstError, tt.wantErr) {
				t.Errorf("FirstError = %v, want %v", res.FirstError, tt.wantErr)
			}
		})
	}
}

func TestLoadJSONRPCErrorKeepsItsCode(t *testing.T) {
	res, err := Load(t.Context(), LoadConfig{
		URL:      serve(t, PlainEcho()),
		Body:     []byte(`{"jsonrpc":"2.0","id":1,"method":"missing"}`),
		Duration: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Load() error = %v, want nil", err)
	}
	var rerr *schema.Error
	if !errors.As(res.FirstError, &rerr) || rerr.Code != schema.CodeMethodNotFound {
		t.Errorf("FirstError = %v, want a *schema.Error with code %d", res.FirstError, schema.CodeMethodNotFound)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	url := serve(t, PlainEcho())
	tests := []struct {
		name string
		cfg  LoadConfig
	}{
		{"no URL", LoadConfig{Body: []byte(EchoRequest)}},
		{"relative URL", LoadConfig{URL: "/rpc", Body: []byte(EchoRequest)}},
		{"no body", LoadConfig{URL: url}},
		{"invalid body", LoadConfig{URL: url, Body: []byte(`{"jsonrpc":"2.0","id":1}`)}},
		{"only a notification", LoadConfig{URL: url, Body: []byte(`{"jsonrpc":"2.0","method":"echo"}`)}},
		{"id twice", LoadConfig{URL: url, Body: []byte(`[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":1,"method":"echo"}]`)}},
		{"negative concurrency", LoadConfig{URL: url, Body: []byte(EchoRequest), Concurrency: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Load(t.Context(), tt.cfg); err == nil {
				t.Errorf("Load(%+v) error = nil, want an error", tt.cfg)
			}
		})
	}
}

// TestLoadStopsWhenCanceled runs a load meant to last an hour and cancels it.
func TestLoadStopsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	res, err := Load(ctx, LoadConfig{URL: serve(t, PlainEcho()), Body: []byte(EchoRequest), Concurrency: 8, Duration: time.Hour})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Load() error = %v, want %v", err, context.Canceled)
	}
	if res.Requests == 0 {
		t.Errorf("Requests = 0, want what was measured before the cancel")
	}
}

// TestLoadGivesUpOnAHungServer checks that a request still unanswered after
// the grace is canceled and counted as an error.
func TestLoadGivesUpOnAHungServer(t *testing.T) {
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices the client hanging up only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	res, err := Load(t.Context(), LoadConfig{
		URL: url, Body: []byte(EchoRequest), Concurrency: 3,
		Duration: 20 * time.Millisecond, Grace: 30 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Load() error = %v, want nil", err)
	}
	if res.Requests != 0 || res.Errors != 3 {
		t.Errorf("Requests, Errors = %d, %d, want 0, 3", res.Requests, res.Errors)
	}
	if !errors.Is(res.FirstError, context.DeadlineExceeded) {
		t.Errorf("FirstError = %v, want %v", res.FirstError, context.DeadlineExceeded)
	}
}
