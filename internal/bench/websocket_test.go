package bench

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/schema"
)

// fakeWebSocket answers echo calls over HTTP as fakeToolbus does and over
// WebSocket on GET, one message after another, counting the connections.
type fakeWebSocket struct {
	// alter makes every WebSocket answer a wrong result.
	alter bool
	conns atomic.Int64
}

func (f *fakeWebSocket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		fakeToolbus{}.ServeHTTP(w, r)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	f.conns.Add(1)
	ctx := r.Context()
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(msg, &req); err != nil {
			return
		}
		result := req.Params
		if f.alter {
			result = json.RawMessage(`{"n":-1}`)
		}
		b, _ := schema.Response{ID: req.ID, Result: result}.AppendJSON(nil)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			return
		}
	}
}

func TestWebSocket(t *testing.T) {
	tests := []struct {
		name    string
		fake    *fakeWebSocket
		wantErr error // nil when every call should succeed
	}{
		{name: "echo over both transports", fake: &fakeWebSocket{}},
		{name: "wrong answers over WebSocket", fake: &fakeWebSocket{alter: true}, wantErr: ErrWrongAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := serve(t, tt.fake)
			res, err := WebSocket(t.Context(), WebSocketConfig{
				HTTPURL:     url + "/rpc",
				WSURL:       "ws" + strings.TrimPrefix(url, "http") + "/rpc",
				Concurrency: 8,
				Rounds:      2,
				Duration:    50 * time.Millisecond,
				Warmup:      -1,
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WebSocket() error = %v, want %v", err, tt.wantErr)
			}
			if got := tt.fake.conns.Load(); got != 2 {
				t.Errorf("WebSocket connections = %d, want one per round, 2", got)
			}
			if res.Concurrency != 8 {
				t.Errorf("Concurrency = %d, want 8", res.Concurrency)
			}
			if res.HTTP.Result.Requests == 0 || res.HTTP.Result.Errors != 0 {
				t.Errorf("HTTP Requests, Errors = %d, %d (first %v), want some, 0", res.HTTP.Result.Requests, res.HTTP.Result.Errors, res.HTTP.Result.FirstError)
			}
			for _, s := range []Side{res.HTTP, res.WS} {
				if len(s.Rounds) != 2 {
					t.Errorf("%s: %d rounds, want 2", s.Target.Name, len(s.Rounds))
				}
			}
			if tt.wantErr != nil {
				if res.WS.Result.Requests != 0 || res.WS.Result.Errors == 0 {
					t.Errorf("WebSocket Requests, Errors = %d, %d, want 0, some", res.WS.Result.Requests, res.WS.Result.Errors)
				}
				return
			}
			if res.WS.Result.Requests == 0 || res.WS.Result.Errors != 0 {
				t.Errorf("WebSocket Requests, Errors = %d, %d (first %v), want some, 0", res.WS.Result.Requests, res.WS.Result.Errors, res.WS.Result.FirstError)
			}
			if res.Ratio <= 0 {
				t.Errorf("Ratio = %v, want positive", res.Ratio)
			}
		})
	}
}

func TestWebSocketConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  WebSocketConfig
	}{
		{name: "no URLs", cfg: WebSocketConfig{}},
		{name: "HTTP URL for WebSocket", cfg: WebSocketConfig{HTTPURL: "http://127.0.0.1:1/rpc", WSURL: "http://127.0.0.1:1/rpc"}},
		{name: "negative rounds", cfg: WebSocketConfig{HTTPURL: "http://127.0.0.1:1/rpc", WSURL: "ws://127.0.0.1:1/rpc", Rounds: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := WebSocket(t.Context(), tt.cfg); err == nil {
				t.Errorf("WebSocket(%+v) error = nil, want one", tt.cfg)
			}
		})
	}
}
