package natsd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/deploy"
)

// quiet is a logger that drops what the server logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testConfig is [DefaultConfig] on a free loopback port, with its store
// in data.
func testConfig(data string) Config {
	c := DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.Data = data
	return c
}

// start starts a server with cfg, shut down when the test ends, and
// returns it with its ready lines.
func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := Start(context.Background(), cfg, quiet)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(s.Shutdown)
	var out bytes.Buffer
	s.WriteReady(&out)
	return s, out.String()
}

func TestStartKeepsThePasswordsItMakes(t *testing.T) {
	data := t.TempDir()
	first, ready := start(t, testConfig(data))
	if !strings.Contains(ready, "passwords made now") {
		t.Errorf("first ready lines %q, want the passwords made now", ready)
	}
	passwords := map[string]string{}
	for _, u := range deploy.Users {
		path := filepath.Join(data, u+passwordExt)
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("password file %s: mode %v (%v), want -rw-------", path, fi.Mode(), err)
		}
		b, _ := os.ReadFile(path)
		passwords[u] = strings.TrimSpace(string(b))
		if want := "  toolbus " + u + " --nats " + first.URL() + " --nats-user " + u + " --nats-password-file " + path + "\n"; !strings.Contains(ready, want) {
			t.Errorf("ready lines %q, want the line %q", ready, want)
		}
	}
	first.Shutdown()

	second, ready := start(t, testConfig(data))
	if !strings.Contains(ready, "passwords kept from an earlier start") {
		t.Errorf("second ready lines %q, want the passwords kept from an earlier start", ready)
	}
	for u, password := range passwords {
		nc, err := nats.Connect(second.URL(), nats.UserInfo(u, password))
		if err != nil {
			t.Errorf("connect as %s with the first start's password = %v, want nil", u, err)
			continue
		}
		nc.Close()
	}
}

func TestStartToken(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.TokenFile = filepath.Join(t.TempDir(), "nats.token")
	s, ready := start(t, cfg)
	if !strings.Contains(ready, AllPowerful+" (made now, and kept in the file across restarts)") {
		t.Errorf("ready lines %q, want the token said all-powerful and made now", ready)
	}
	b, err := os.ReadFile(cfg.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	if strings.Contains(ready, token) {
		t.Errorf("ready lines %q show the token of --token-file", ready)
	}
	nc, err := nats.Connect(s.URL(), nats.Token(token))
	if err != nil {
		t.Fatalf("connect with the token = %v, want nil", err)
	}
	nc.Close()
	if _, err := nats.Connect(s.URL()); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("connect without the token = %v, want %v", err, nats.ErrAuthorization)
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Whether the server becomes ready first or not, Run stops it and
	// reports no error.
	if err := Run(ctx, testConfig(t.TempDir()), io.Discard, quiet); err != nil {
		t.Errorf("Run(ended context) = %v, want nil", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string // the flag the error names, or "" for none
	}{
		{name: "defaults", change: func(*Config) {}},
		{name: "listen without a port", change: func(c *Config) { c.Listen = "4222" }, want: "--nats-listen"},
		{name: "monitor without a port", change: func(c *Config) { c.Monitor = "8222" }, want: "--monitor-listen"},
		{name: "no store", change: func(c *Config) { c.Data = "" }, want: "--data"},
		{name: "no store but the file's", change: func(c *Config) { c.Data, c.File = "", "nats.conf" }},
		{name: "no payload", change: func(c *Config) { c.MaxPayload = 0 }, want: "--max-payload"},
		{name: "too large a payload", change: func(c *Config) { c.MaxPayload = MaxPayload + 1 }, want: "--max-payload"},
		{name: "token and token file", change: func(c *Config) { c.Token, c.TokenFile = "x", "tf" }, want: "--token-file"},
		{name: "open and a token", change: func(c *Config) { c.Token, c.NoAuth = "x", true }, want: "--no-auth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := c.Validate()
			if (err != nil) != (tt.want != "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
func TestRoleUsersHaveTheShippedPermissions(t *testing.T) {
	cfg := testConfig(t.TempDir())
	opts, _, err := cfg.options(quiet)
	if err != nil {
		t.Fatalf("options() = %v", err)
	}
	if opts.Authorization != "" || opts.NoAuthUser != "" {
		t.Errorf("options() token %q, user without authentication %q, want neither", opts.Authorization, opts.NoAuthUser)
	}
	// The shipped file as a node of the deployment reads it.
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", "ingress-pass")
	t.Setenv("TOOLBUS_WORKER_NATS_PASSWORD", "worker-pass")
	shipped, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", "cluster-secure.conf"))
	if err != nil {
		t.Fatalf("ProcessConfigFile(cluster-secure.conf): %v", err)
	}
	got := map[string]*server.User{}
	for _, u := range opts.Users {
		got[u.Username] = u
	}
	if len(got) != len(shipped.Users) {
		t.Errorf("options() has users %v, want the %d of cluster-secure.conf", got, len(shipped.Users))
	}
	for _, want := range shipped.Users {
		u := got[want.Username]
		if u == nil {
			t.Errorf("options() has no user %s", want.Username)
			continue
		}
		if !reflect.DeepEqual(u.Permissions, want.Permissions) {
			got, _ := json.Marshal(u.Permissions)
			want, _ := json.Marshal(want.Permissions)
			t.Errorf("user %s has permissions %s, want cluster-secure.conf's %s", u.Username, got, want)
		}
		b, err := os.ReadFile(filepath.Join(cfg.Data, u.Username+passwordExt))
		if err != nil || strings.TrimSpace(string(b)) != u.Password {
			t.Errorf("user %s: password file holds %q (%v), want the user's password", u.Username, b, err)
		}
	}
}

func TestAuthorizes(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   bool
	}{
		{name: "nothing", config: "max_payload: 1MB", want: false},
		{name: "auth timeout alone", config: "authorization { timeout: 2 }", want: false},
		{name: "accounts without users", config: "accounts { A: {} }", want: false},
		{name: "token", config: "authorization { token: s3cret }", want: true},
		{name: "one user", config: "authorization { user: a, password: b }", want: true},
		{name: "users", config: "authorization { users: [{user: a, password: b}] }", want: true},
		{name: "users of an account", config: "accounts { A: { users: [{user: a, password: b}] } }", want: true},
		{name: "nkey user", config: "authorization { users: [{nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4}] }", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &server.Options{}
			if err := opts.ProcessConfigString(tt.config); err != nil {
				t.Fatalf("ProcessConfigString(%q): %v", tt.config, err)
			}
			if got := authorizes(opts); got != tt.want {
				t.Errorf("authorizes(%q) = %v, want %v", tt.config, got, tt.want)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "plain path", in: "/var/lib/toolbus/nats.token", want: "/var/lib/toolbus/nats.token"},
		{name: "space", in: "my dir/nats.token", want: "'my dir/nats.token'"},
		{name: "quote", in: "it's", want: `'it'\''s'`},
		{name: "dollar", in: "$HOME/t", want: "'$HOME/t'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShellQuote(tt.in); got != tt.want {
				t.Errorf("ShellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}
