package schema

import "testing"

func TestMatchMethod(t *testing.T) {
	tests := []struct {
		name, pattern, method string
		want                  bool
	}{
		{name: "exact", pattern: "fetch_page", method: "fetch_page", want: true},
		{name: "exact other", pattern: "fetch_page", method: "fetch_pages"},
		{name: "star one token", pattern: "math.*", method: "math.add", want: true},
		{name: "star not two tokens", pattern: "math.*", method: "math.vec.add"},
		{name: "star not zero tokens", pattern: "math.*", method: "math"},
		{name: "tail", pattern: "math.>", method: "math.vec.add", want: true},
		{name: "tail needs a token", pattern: "math.>", method: "math"},
		{name: "everything", pattern: ">", method: "a.b.c", want: true},
		{name: "jobs", pattern: "rpc.jobs.*", method: "rpc.jobs.get", want: true},
		{name: "prefix is not a match", pattern: "math", method: "math.add"},
		{name: "middle star", pattern: "a.*.c", method: "a.b.c", want: true},
		{name: "leading star", pattern: "*.add", method: "math.add", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MatchMethod(tc.pattern, tc.method); got != tc.want {
				t.Errorf("MatchMethod(%q, %q) = %v, want %v", tc.pattern, tc.method, got, tc.want)
			}
		})
	}
}

func TestCoversPattern(t *testing.T) {
	tests := []struct {
		name, pattern, other string
		want                 bool
	}{
		{name: "a name", pattern: "math.*", other: "math.add", want: true},
		{name: "another name", pattern: "math.*", other: "text.upper"},
		{name: "itself", pattern: "math.*", other: "math.*", want: true},
		{name: "a star by a name", pattern: "math.add", other: "math.*"},
		{name: "a tail by a star", pattern: "math.*", other: "math.>"},
		{name: "a tail by a tail", pattern: "math.>", other: "math.>", want: true},
		{name: "a deeper tail", pattern: "math.>", other: "math.vec.>", want: true},
		{name: "a star by a tail", pattern: "math.>", other: "math.*", want: true},
		{name: "everything", pattern: ">", other: "a.*.>", want: true},
		{name: "a middle star", pattern: "a.*.c", other: "a.*.c", want: true},
		{name: "a shorter pattern", pattern: "a.*", other: "a.*.c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CoversPattern(tc.pattern, tc.other); got != tc.want {
				t.Errorf("CoversPattern(%q, %q) = %v, want %v", tc.pattern, tc.other, got, tc.want)
			}
		})
	}
}

func TestOverlapPatterns(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "same name", a: "math.add", b: "math.add", want: true},
		{name: "other name", a: "math.add", b: "math.sub"},
		{name: "star and name", a: "math.*", b: "math.add", want: true},
		{name: "star and longer name", a: "math.*", b: "math.add.int"},
		{name: "tail and longer name", a: "math.>", b: "math.add.int", want: true},
		{name: "tail needs a token", a: "math.>", b: "math"},
		{name: "everything", a: ">", b: "echo", want: true},
		{name: "two stars", a: "*.add", b: "math.*", want: true},
		{name: "star and tail", a: "a.*.c", b: "a.b.>", want: true},
		{name: "star and other name", a: "a.*.c", b: "a.b.d"},
		{name: "prefix", a: "echo", b: "echo.more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
				if got := OverlapPatterns(args[0], args[1]); got != tc.want {
					t.Errorf("OverlapPatterns(%q, %q) = %v, want %v", args[0], args[1], got, tc.want)
				}
			}
		})
	}
}

func TestValidatePattern(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		wantErr bool
	}{
		{name: "name", pattern: "fetch_page"},
		{name: "star", pattern: "math.*"},
		{name: "tail", pattern: "math.>"},
		{name: "all", pattern: ">"},
		{name: "tail not last", pattern: "a.>.b", wantErr: true},
		{name: "empty token", pattern: "a..b", wantErr: true},
		{name: "glued star", pattern: "math*", wantErr: true},
		{name: "empty", pattern: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidatePattern(tc.pattern); (err != nil) != tc.wantErr {
				t.Errorf("ValidatePattern(%q) = %v, want error %v", tc.pattern, err, tc.wantErr)
			}
		})
	}
}
