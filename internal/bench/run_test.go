package bench

import (
	"bytes"
	"io"
	"os"
	"testing"
)

func TestProgressWriter(t *testing.T) {
	var buf bytes.Buffer
	tests := []struct {
		name    string
		mode    string
		stderr  io.Writer
		want    bool // whether the progress line is drawn
		wantErr bool
	}{
		{name: "on draws on anything", mode: "on", stderr: &buf, want: true},
		{name: "off draws nothing", mode: "off", stderr: &buf},
		{name: "auto skips a buffer", mode: "auto", stderr: &buf},
		{name: "auto skips a file that is not a terminal", mode: "auto", stderr: devNull(t)},
		{name: "unknown mode", mode: "sometimes", stderr: &buf, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ProgressWriter(tt.mode, tt.stderr)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ProgressWriter(%q) error = %v, want error %v", tt.mode, err, tt.wantErr)
			}
			if got := w != nil; got != tt.want {
				t.Errorf("ProgressWriter(%q) draws = %v, want %v", tt.mode, got, tt.want)
			}
		})
	}
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no %s to test with: %v", os.DevNull, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
