package schema

import "testing"

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		code int
		want Class
	}{
		{"success", 0, ClassNone},
		{"business code", 2001, ClassTool},
		{"negative business code", -1, ClassTool},
		{"below the reserved range", -40000, ClassTool},
		{"tool error", CodeToolError, ClassTool},
		{"parse error", CodeParseError, ClassCaller},
		{"invalid request", CodeInvalidRequest, ClassCaller},
		{"method not found", CodeMethodNotFound, ClassCaller},
		{"invalid params", CodeInvalidParams, ClassCaller},
		{"forbidden", CodeForbidden, ClassCaller},
		{"job not found", CodeJobNotFound, ClassCaller},
		{"internal", CodeInternal, ClassInfra},
		{"timeout", CodeTimeout, ClassInfra},
		{"overloaded", CodeOverloaded, ClassInfra},
		{"unavailable", CodeUnavailable, ClassInfra},
		{"canceled", CodeCanceled, ClassInfra},
		{"limit exceeded", CodeLimitExceeded, ClassInfra},
		{"undefined reserved", -32050, ClassInfra},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.code); got != tc.want {
				t.Errorf("Classify(%d) = %v, want %v", tc.code, got, tc.want)
			}
		})
	}
}
