package worker

import "testing"

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"math.add", "math.add", true},
		{"math.add", "math.sub", false},
		{"math.*", "math.add", true},
		{"math.*", "math.add.int", false},
		{"math.>", "math.add.int", true},
		{"math.>", "math", false},
		{">", "echo", true},
		{"*.add", "math.*", true},
		{"a.*.c", "a.b.>", true},
		{"a.*.c", "a.b.d", false},
		{"echo", "echo.more", false},
	} {
		for _, args := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := overlaps(args[0], args[1]); got != tc.want {
				t.Errorf("overlaps(%q, %q) = %v, want %v", args[0], args[1], got, tc.want)
			}
		}
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, method string
		want                  bool
	}{
		{"exact", "math.add", "math.add", true},
		{"other name", "math.add", "math.sub", false},
		{"star", "math.*", "math.add", true},
		{"star too short", "math.*", "math", false},
		{"star too long", "math.*", "math.add.int", false},
		{"tail", "math.>", "math.add.int", true},
		{"tail needs a token", "math.>", "math", false},
		{"leading star", "*.add", "math.add", true},
		{"prefix only", "echo", "echo.more", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := matches(tc.pattern, tc.method); got != tc.want {
				t.Errorf("matches(%q, %q) = %v, want %v", tc.pattern, tc.method, got, tc.want)
			}
		})
	}
}
