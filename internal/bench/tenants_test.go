package bench

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *schema.Error
		want string
	}{
		{"limit", &schema.Error{Code: schema.CodeOverloaded, Data: json.RawMessage(`{"limit":"caller_max_in_flight","retry_after_ms":50}`)}, "-32002 caller_max_in_flight"},
		{"reason", &schema.Error{Code: schema.CodeMethodNotFound, Data: json.RawMessage(`{"reason":"invalid_method_name"}`)}, "-32601 invalid_method_name"},
		{"no data", &schema.Error{Code: schema.CodeInternal}, "-32603"},
		{"data not an object", &schema.Error{Code: schema.CodeToolError, Data: json.RawMessage(`"boom"`)}, "-32000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorClass(tc.err); got != tc.want {
				t.Errorf("errorClass(%+v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestTenantsNeedsTwoKeys(t *testing.T) {
	for _, tc := range []struct {
		name          string
		victim, flood string
	}{
		{"no victim key", "", "f"},
		{"no flood key", "v", ""},
		{"the same key", "k", "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Tenants(context.Background(), TenantsConfig{URL: "http://127.0.0.1:1/rpc", VictimKey: tc.victim, FloodKey: tc.flood}); err == nil {
				t.Errorf("Tenants with keys %q and %q = nil error, want one", tc.victim, tc.flood)
			}
		})
	}
}
