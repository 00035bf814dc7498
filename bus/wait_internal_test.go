package bus

import "testing"

func TestVersionAtLeast(t *testing.T) {
	tests := []struct {
		v, min string
		want   bool
	}{
		{"2.11.0", "2.11.0", true},
		{"2.15.3", "2.11.0", true},
		{"2.10.22", "2.11.0", false},
		{"2.9.10", "2.11.0", false},
		{"3.0.0", "2.11.0", true},
		{"2.11.0-beta.2", "2.11.0", true},
		{"v2.12.1", "2.11.0", true},
		{"unknown", "2.11.0", true},
		{"", "2.11.0", true},
	}
	for _, tt := range tests {
		if got := versionAtLeast(tt.v, tt.min); got != tt.want {
			t.Errorf("versionAtLeast(%q, %q) = %v, want %v", tt.v, tt.min, got, tt.want)
		}
	}
}
