package ingress

import (
	"net/http"
	"testing"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/schema"
)

func TestRateLimit(t *testing.T) {
	conf := auth.Config{Keys: []auth.APIKey{
		{Name: "alice", SHA256: auth.HashAPIKey("a"), Allow: []string{">"}},
		{Name: "bob", SHA256: auth.HashAPIKey("b"), Allow: []string{">"}},
	}}
	s, _ := newServer(t, WithAuth(conf),
		WithRateLimit(quota.RateLimit{PerSecond: 0.001, Burst: 2}),
		WithCallerRateLimit("bob", quota.RateLimit{PerSecond: 0.001, Burst: 3}))
	batch := `[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":2,"method":"echo"},{"jsonrpc":"2.0","id":3,"method":"echo"},{"jsonrpc":"2.0","id":4,"method":"echo"}]`
	tests := []struct {
		name  string
		key   string
		codes []int
	}{
		{name: "default bucket", key: "a", codes: []int{0, 0, schema.CodeOverloaded, schema.CodeOverloaded}},
		{name: "own bucket", key: "b", codes: []int{0, 0, 0, schema.CodeOverloaded}},
		{name: "empty bucket", key: "a", codes: []int{schema.CodeOverloaded, schema.CodeOverloaded, schema.CodeOverloaded, schema.CodeOverloaded}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(s.Handler(), post(batch, "X-Api-Key", tc.key))
			if rec.Code != http.StatusOK {
				t.Fatalf("POST = HTTP %d, want 200", rec.Code)
			}
			_, as := decode(t, rec.Body.Bytes())
			for i, a := range as {
				if a.Code != tc.codes[i] {
					t.Errorf("answer %d code = %d, want %d", i, a.Code, tc.codes[i])
				}
				if a.Code == schema.CodeOverloaded {
					ms, _ := a.Data["retry_after_ms"].(float64)
					if ms < 1 || a.Data["limit"] != "rate_limit" {
						t.Errorf("answer %d data = %v, want retry_after_ms and limit rate_limit", i, a.Data)
					}
				}
			}
		})
	}
}

func TestWithRateLimitInvalid(t *testing.T) {
	if _, err := New(newFake(), WithRateLimit(quota.RateLimit{PerSecond: 1})); err == nil {
		t.Error("WithRateLimit(a zero burst) error = nil, want an error")
	}
}
