package conform

import "testing"

func TestSameJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{"spelling of a number", `{"f":2.50,"e":1.5e3}`, `{"e":1500,"f":2.5}`, true},
		{"every digit kept", `12345678901234567890`, `12345678901234567890`, true},
		{"a digit lost", `12345678901234567890`, `12345678901234567000`, false},
		{"string is not number", `"101"`, `101`, false},
		{"member order", `{"a":1,"b":[1,{}]}`, `{"b":[1,{}],"a":1}`, true},
		{"array order", `[1,2]`, `[2,1]`, false},
		{"a missing member", `{"a":1}`, `{"a":1,"b":null}`, false},
		{"not JSON", `{`, `{`, false},
		{"trailing value", `1 2`, `1`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameJSON([]byte(tc.a), []byte(tc.b)); got != tc.want {
				t.Errorf("sameJSON(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
