package schema_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func TestParseRefusesHostileBodies(t *testing.T) {
	lim := schema.Limits{MaxBatchItems: 1000, MaxDepth: 64}
	for _, tc := range []struct {
		name  string
		body  string
		want  error
		limit string
	}{
		{"invalid UTF-8 in a string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":[\"\xff\xfe\"]}", schema.ErrParse, ""},
		{"invalid UTF-8 in a method", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ech\xc3\"}", schema.ErrParse, ""},
		{"ten thousand levels", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), schema.ErrLimitExceeded, "max_depth"},
		{"a million items", "[" + strings.Repeat("{},", 999999) + "{}]", schema.ErrLimitExceeded, "max_batch_items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := schema.Parse([]byte(tc.body), lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %v, want %v", err, tc.want)
			}
			if tc.limit != "" && !strings.Contains(string(err.Data), tc.limit) {
				t.Fatalf("Parse error data = %s, want it to name %s", err.Data, tc.limit)
			}
		})
	}
}
