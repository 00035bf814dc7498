package bus_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestReadPasswordFile(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{name: "final newline", text: "s3cret\n", want: "s3cret"},
		{name: "no newline", text: "s3cret", want: "s3cret"},
		{name: "carriage return", text: "s3cret\r\n", want: "s3cret"},
		{name: "white space around", text: "  s3cret \n\n", want: "s3cret"},
		{name: "inner space kept", text: "s3 cret\n", want: "s3 cret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "worker.password")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			c := bus.RemoteConfig{User: "worker", PasswordFile: path}
			got, err := c.ReadPasswordFile()
			if err != nil || got != tt.want {
				t.Errorf("ReadPasswordFile(%q) = %q, %v, want %q", tt.text, got, err, tt.want)
			}
		})
	}
}
