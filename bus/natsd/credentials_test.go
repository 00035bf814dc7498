package natsd

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/deploy"
)

func TestWriteCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".env")
	cfg := DefaultCredentialsConfig()
	cfg.Out = path
	var stderr bytes.Buffer
	if err := WriteCredentials(cfg, io.Discard, &stderr); err != nil {
		t.Fatal(err)
	}
	if want := "wrote the NATS passwords of 2 users (env) to " + path + "\n"; stderr.String() != want {
		t.Errorf("WriteCredentials() said %q, want %q", stderr.String(), want)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range deploy.Users {
		if !strings.Contains(string(first), deploy.PasswordVar(u)+"=") {
			t.Errorf("WriteCredentials() wrote:\n%s\nwant a line %s=...", first, deploy.PasswordVar(u))
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("Out %s: mode %v (%v), want 0600", path, st.Mode().Perm(), err)
	}
	// The passwords the cluster runs with are kept...
	if err := WriteCredentials(cfg, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("WriteCredentials() over an existing Out = %v, want an error naming --force", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Error("a refused second write changed the file")
	}
	// ...unless Force, which leaves the file private.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Force, cfg.Format = true, "k8s"
	if err := WriteCredentials(cfg, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("Out %s after Force: mode %v (%v), want 0600", path, st.Mode().Perm(), err)
	}
}

func TestCredentialsConfigRefused(t *testing.T) {
	tests := []struct {
		name   string
		change func(*CredentialsConfig)
		want   string // the flag the error names
	}{
		{name: "no format", change: func(c *CredentialsConfig) { c.Format = "yaml" }, want: "--format"},
		{name: "a user with a capital", change: func(c *CredentialsConfig) { c.Users = []string{"Worker"} }, want: "--users"},
		{name: "a user twice", change: func(c *CredentialsConfig) { c.Users = []string{"worker", "worker"} }, want: "--users"},
		{name: "out in no directory", change: func(c *CredentialsConfig) { c.Out = filepath.Join(t.TempDir(), "missing", "x.env") }, want: "--out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultCredentialsConfig()
			tt.change(&c)
			if err := WriteCredentials(c, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("WriteCredentials() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if err := (CredentialsConfig{Format: "yaml"}).Validate(); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Errorf("Validate(format yaml) = %v, want an error naming --format", err)
	}
}
