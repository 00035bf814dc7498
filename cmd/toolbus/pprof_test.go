package main

import (
	"testing"
)

// TestPprofRefusesOutsideLoopback checks that the profiler is off without
// the variable and refused on an address that is not loopback; it starts
// nothing.
func TestPprofRefusesOutsideLoopback(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		wantErr     bool
	}{
		{"unset", "", false},
		{"all interfaces", "0.0.0.0:6060", true},
		{"no host", ":6060", true},
		{"a name", "localhost:6060", true},
		{"no port", "127.0.0.1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(pprofEnv, tc.value)
			if err := servePprof(); (err != nil) != tc.wantErr {
				t.Errorf("servePprof() with %s=%q = %v, want error %v", pprofEnv, tc.value, err, tc.wantErr)
			}
		})
	}
}
