package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/deploy"
)

func TestNatsCredentials(t *testing.T) {
	ctx := context.Background()
	t.Run("standard output", func(t *testing.T) {
		out, err := execute(t, ctx, "nats-credentials")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range deploy.Users {
			if !strings.Contains(out, "\n"+deploy.PasswordVar(u)+"=p") {
				t.Errorf("nats-credentials printed:\n%s\nwant a line %s=...", out, deploy.PasswordVar(u))
			}
		}
	})
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), ".env")
		if _, err := execute(t, ctx, "nats-credentials", "--out", path); err != nil {
			t.Fatal(err)
		}
		first, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("--out %s: mode %v (%v), want 0600", path, st.Mode().Perm(), err)
		}
		// A second run keeps the passwords the cluster runs with...
		if _, err := execute(t, ctx, "nats-credentials", "--out", path); err == nil || !strings.Contains(err.Error(), "--force") {
			t.Errorf("nats-credentials over an existing --out = %v, want an error naming --force", err)
		}
		if again, _ := os.ReadFile(path); string(again) != string(first) {
			t.Error("a refused second run changed the file")
		}
		// ...unless told to replace them, which leaves the file private.
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := execute(t, ctx, "nats-credentials", "--out", path, "--force", "--format", "k8s", "--users", "ingress,worker,worker-math"); err != nil {
			t.Fatal(err)
		}
		secrets, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("--out %s after --force: mode %v (%v), want 0600", path, st.Mode().Perm(), err)
		}
		for _, u := range []string{"ingress", "worker", "worker-math"} {
			if !strings.Contains(string(secrets), "name: "+deploy.SecretName(u)+"\n") {
				t.Errorf("--format k8s wrote:\n%s\nwant a Secret %s", secrets, deploy.SecretName(u))
			}
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "yaml"}, "--format"},
		{[]string{"--users", "Worker"}, "--users"},
		{[]string{"--users", "worker,worker"}, "--users"},
		{[]string{"--out", filepath.Join(t.TempDir(), "missing", "x.env")}, "--out"},
	} {
		if _, err := execute(t, ctx, append([]string{"nats-credentials"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("nats-credentials %s = %v, want an error naming %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
