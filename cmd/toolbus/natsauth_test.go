package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// startUserNATS starts a NATS server on a free loopback port that admits
// the user "worker" with password pass only, and returns its URL.
func startUserNATS(t *testing.T, pass string) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "worker", Password: pass}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready after 10s")
	}
	return srv.ClientURL()
}

func TestWorkerAuthenticatesFromEnv(t *testing.T) {
	url := startUserNATS(t, "w0rker-pass")
	// The server has no JetStream: a worker needs none, jobs included.
	// The password comes from the flag's environment twin, as a Kubernetes
	// Secret would give it.
	t.Setenv("TOOLBUS_NATS_PASSWORD", "w0rker-pass")
	r := runCommand(t, "worker", "--nats", url, "--nats-user", "worker", "--metrics-listen", "127.0.0.1:0")
	nc, err := bus.Connect(url, bus.WithUserPassword("worker", "w0rker-pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if reply := requestUntilServed(t, nc, bus.DefaultPrefix, r.done); reply.Error != nil {
		t.Fatalf("echo reply error = %v, want none", reply.Error)
	}
}

// writePassword writes text to a file of mode 0600 and returns its path.
func writePassword(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker.password")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWorkerAuthenticatesFromPasswordFile(t *testing.T) {
	url := startUserNATS(t, "w0rker-pass")
	path := writePassword(t, "w0rker-pass\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{name: "flag", args: []string{"--nats-password-file", path}},
		{name: "environment", env: map[string]string{"TOOLBUS_NATS_PASSWORD_FILE": path}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"worker", "--nats", url, "--nats-user", "worker", "--jobs=false", "--metrics-listen", "127.0.0.1:0"}, tt.args...)
			r := runCommand(t, args...)
			nc, err := bus.Connect(url, bus.WithUserPassword("worker", "w0rker-pass"))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if reply := requestUntilServed(t, nc, bus.DefaultPrefix, r.done); reply.Error != nil {
				t.Fatalf("echo reply error = %v, want none", reply.Error)
			}
			if err := r.stop(); err != nil {
				t.Errorf("toolbus %s stopped with %v, want nil", strings.Join(args, " "), err)
			}
		})
	}
}

// TestWorkerAuthenticatesFromTokenFile: a worker joins a bus closed by a
// token with the token read from --token-file, as from the file `toolbus
// nats --token-file` keeps.
func TestWorkerAuthenticatesFromTokenFile(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	path := writePassword(t, "t0ken\n")
	args := []string{"worker", "--nats", e.ClientURL(), "--token-file", path, "--jobs=false", "--metrics-listen", "127.0.0.1:0"}
	r := runCommand(t, args...)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if reply := requestUntilServed(t, nc, bus.DefaultPrefix, r.done); reply.Error != nil {
		t.Fatalf("echo reply error = %v, want none", reply.Error)
	}
	if err := r.stop(); err != nil {
		t.Errorf("toolbus %s stopped with %v, want nil", strings.Join(args, " "), err)
	}
}

func TestWorkerWrongPasswordFileFails(t *testing.T) {
	url := startUserNATS(t, "w0rker-pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := execute(t, ctx, "worker", "--nats", url, "--nats-user", "worker", "--nats-password-file", writePassword(t, "wrong\n"), "--jobs=false", "--metrics-listen", "")
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("worker with a wrong password in its file = %v, want %v", err, nats.ErrAuthorization)
	}
}

func TestWorkerWrongPasswordFails(t *testing.T) {
	url := startUserNATS(t, "w0rker-pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := execute(t, ctx, "worker", "--nats", url, "--nats-user", "worker", "--nats-password", "wrong", "--jobs=false", "--metrics-listen", "")
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("worker with a wrong password = %v, want %v", err, nats.ErrAuthorization)
	}
}

func TestNATSAuthFlagErrors(t *testing.T) {
	const noNATS = "nats://127.0.0.1:1"
	missing := filepath.Join(t.TempDir(), "missing")
	password := writePassword(t, "s3cret\n")
	empty := writePassword(t, " \n")
	tests := []struct {
		name    string
		args    []string
		flag    string // the flag the message must name
		wantErr error
	}{
		{"password without user", []string{"worker", "--nats-password", "p"}, "--nats-user", nil},
		{"user and token", []string{"ingress", "--nats-user", "u", "--nats-token", "t"}, "--nats-token", nil},
		{"nkey and creds", []string{"worker", "--nats-nkey", missing, "--nats-creds", missing}, "--nats-nkey", fs.ErrNotExist},
		{"creds missing", []string{"ingress", "--nats-creds", missing}, "--nats-creds", fs.ErrNotExist},
		{"CA missing", []string{"worker", "--nats-tls-ca", missing}, "--nats-tls-ca", fs.ErrNotExist},
		{"cert without key", []string{"ingress", "--nats-tls-cert", missing}, "--nats-tls-key", nil},
		{"key missing", []string{"worker", "--nats-tls-cert", missing, "--nats-tls-key", missing}, "--nats-tls-cert", fs.ErrNotExist},
		{"password file without user", []string{"worker", "--nats-password-file", password}, "--nats-user", nil},
		{"password and password file", []string{"ingress", "--nats-user", "u", "--nats-password", "p", "--nats-password-file", password}, "--nats-password-file", nil},
		{"password file missing", []string{"worker", "--nats-user", "u", "--nats-password-file", missing}, "--nats-password-file " + missing, fs.ErrNotExist},
		{"password file a directory", []string{"ingress", "--nats-user", "u", "--nats-password-file", t.TempDir()}, "--nats-password-file", syscall.EISDIR},
		{"password file empty", []string{"worker", "--nats-user", "u", "--nats-password-file", empty}, "--nats-password-file " + empty, nil},
		{"token and token file", []string{"worker", "--nats-token", "t", "--token-file", password}, "--token-file", nil},
		{"user and token file", []string{"ingress", "--nats-user", "u", "--nats-password", "p", "--token-file", password}, "--token-file", nil},
		{"token file missing", []string{"worker", "--token-file", missing}, "--token-file " + missing, fs.ErrNotExist},
		{"token file empty", []string{"ingress", "--token-file", empty}, "--token-file " + empty, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append(tt.args, "--nats", noNATS)
			_, err := execute(t, ctx, args...)
			if err == nil {
				t.Fatalf("toolbus %s = nil, want an error", strings.Join(args, " "))
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("toolbus %s = %v, want %v", strings.Join(args, " "), err, tt.wantErr)
			}
			// The flag's name is what tells the operator what to fix.
			if !strings.Contains(err.Error(), tt.flag) {
				t.Errorf("toolbus %s = %v, want it to name %s", strings.Join(args, " "), err, tt.flag)
			}
		})
	}
}
