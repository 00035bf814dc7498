package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

var (
	natsReadyLine = regexp.MustCompile(`toolbus nats ready: (nats://\S+)\n`)
	natsTokenArg  = regexp.MustCompile(`toolbus worker --nats \S+ --nats-token (\S+)\n`)
)

// runNats runs `toolbus nats` with args on a free loopback port, its store
// in a temporary directory, and returns it once it is ready, with its URL.
func runNats(t *testing.T, args ...string) (*running, string) {
	t.Helper()
	r := runCommand(t, append([]string{"nats", "--nats-listen", "127.0.0.1:0", "--data", t.TempDir()}, args...)...)
	return r, r.waitFor(t, natsReadyLine)
}

// stopNats stops r and checks that it shut down cleanly.
func stopNats(t *testing.T, r *running) {
	t.Helper()
	if err := r.stop(); err != nil {
		t.Errorf("toolbus nats stopped with %v, want nil", err)
	}
}

// dialNats opens a connection to url with opts, closed when the test ends.
func dialNats(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("toolbus-nats-test")}, opts...)...)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// refusedByNats checks that url turns away a client with opts.
func refusedByNats(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err == nil {
		nc.Close()
		t.Fatalf("connect to %s = nil, want %v", url, nats.ErrAuthorization)
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect to %s = %v, want %v", url, err, nats.ErrAuthorization)
	}
}

// useJetStream stores and reads back a key in a bucket that needs what
// toolbus's job records need: per-message TTLs and limit markers.
func useJetStream(t *testing.T, nc *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "natstest", History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatalf("CreateKeyValue: %v", err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV.natstest.k", Data: []byte("v")}, jetstream.WithMsgTTL(time.Hour)); err != nil {
		t.Fatalf("publish with a TTL: %v", err)
	}
	e, err := kv.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get(k): %v", err)
	}
	if got := string(e.Value()); got != "v" {
		t.Errorf("Get(k) = %q, want %q", got, "v")
	}
}

func TestNatsGeneratedToken(t *testing.T) {
	r, url := runNats(t)
	token := r.waitFor(t, natsTokenArg)
	if len(token) < 43 {
		t.Errorf("generated token %q has %d characters, want 43 or more (32 random bytes)", token, len(token))
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(token) {
		t.Errorf("generated token %q, want URL-safe base64", token)
	}

	refusedByNats(t, url)
	refusedByNats(t, url, nats.Token("not-"+token))
	useJetStream(t, dialNats(t, url, nats.Token(token)))

	// The printed lines are command lines of the ingress and the worker
	// whose NATS flags open a connection, as those commands open it.
	for _, part := range []string{"ingress", "worker"} {
		line := r.waitFor(t, regexp.MustCompile(`(?m)^  toolbus (`+part+` --nats .*)$`))
		args := strings.Fields(line)
		cmd := subcommand(t, args[1:], args[0])
		natsURL, err := cmd.Flags().GetString("nats")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := cmd.Flags().GetString("nats-token")
		if err != nil {
			t.Fatal(err)
		}
		if natsURL != url || tok != token {
			t.Errorf("toolbus %s: --nats %s --nats-token %s, want %s and the token %s", line, natsURL, tok, url, token)
		}
		nc, err := bus.Connect(natsURL, bus.WithName("toolbus-"+part), bus.WithToken(tok))
		if err != nil {
			t.Fatalf("toolbus %s: connect: %v", line, err)
		}
		nc.Close()
	}
	stopNats(t, r)
}

func TestNatsTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats.token")
	r, url := runNats(t, "--token-file", path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("--token-file: %v", err)
	}
	token := strings.TrimSpace(string(b))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("--token-file %s mode = %v (%v), want -rw-------", path, fi.Mode(), err)
	}
	out := r.out.String()
	if want := `--nats-token "$(cat ` + path + `)"`; !strings.Contains(out, want) {
		t.Errorf("ready lines %q, want them to read the token with %s", out, want)
	}
	if strings.Contains(out, token) {
		t.Errorf("ready lines %q show the token kept in --token-file", out)
	}
	refusedByNats(t, url)
	dialNats(t, url, nats.Token(token))
	stopNats(t, r)

	// A restart keeps the token its clients know.
	r, url = runNats(t, "--token-file", path)
	if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != token {
		t.Errorf("--token-file after a restart = %q (%v), want %q unchanged", b, err, token)
	}
	dialNats(t, url, nats.Token(token))
	stopNats(t, r)
}

// writeConfig writes a nats-server configuration file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// takenAddr returns a loopback address something else listens on while the
// test runs.
func takenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func TestNatsConfigUsers(t *testing.T) {
	// The file's listen is taken: --nats-listen, given, overrides it. Its
	// max_payload stands, as --max-payload is not given.
	config := writeConfig(t, `
listen: `+takenAddr(t)+`
max_payload: 1MB
authorization {
  users: [
    {user: ingress, password: "ingress-pass"}
    {user: reader, password: "reader-pass", permissions: {publish: "nothing.>", subscribe: "_INBOX.>"}}
  ]
}
`)
	r, url := runNats(t, "--config", config)
	if out := r.out.String(); strings.Contains(out, "--nats-token") || !strings.Contains(out, "join as a user of "+config) {
		t.Errorf("ready lines %q, want them to name the users of %s and no token", out, config)
	}

	refusedByNats(t, url)
	refusedByNats(t, url, nats.UserInfo("ingress", "wrong"))
	nc := dialNats(t, url, nats.UserInfo("ingress", "ingress-pass"))
	if got, want := nc.MaxPayload(), int64(1<<20); got != want {
		t.Errorf("max payload = %d, want the file's %d", got, want)
	}
	// JetStream is on although the file does not ask for it.
	useJetStream(t, nc)

	// The file's permissions hold: the server tells the reader it may not
	// publish there.
	denied := make(chan error, 1)
	reader := dialNats(t, url, nats.UserInfo("reader", "reader-pass"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	}))
	if err := reader.Publish("toolbus.call.echo", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("publish outside the reader's permissions = %v, want %v", err, nats.ErrPermissionViolation)
		}
	case <-time.After(30 * time.Second):
		t.Error("publish outside the reader's permissions: no error after 30s, want a permissions violation")
	}
	stopNats(t, r)
}

func TestNatsNoAuth(t *testing.T) {
	config := writeConfig(t, "max_payload: 2MB\n")
	r, url := runNats(t, "--config", config, "--no-auth")
	if out := r.out.String(); !strings.Contains(out, "open (--no-auth)") || strings.Contains(out, "--nats-token") {
		t.Errorf("ready lines %q, want them to say the bus is open, without a token", out)
	}
	useJetStream(t, dialNats(t, url))
	stopNats(t, r)
}

func TestNatsRefuses(t *testing.T) {
	dir := t.TempDir()
	open := writeConfig(t, "max_payload: 2MB\n")
	users := writeConfig(t, "authorization { user: a, password: b }\n")
	taken := takenAddr(t)
	listenTaken := writeConfig(t, "listen: "+taken+"\nauthorization { token: t0ken-of-the-file }\n")
	tests := []struct {
		name    string
		args    []string
		want    string // what the message must name: the flag to change
		wantErr error
	}{
		{name: "config without authorization", args: []string{"--config", open}, want: "--no-auth"},
		{name: "config with users and a token", args: []string{"--config", users, "--nats-token", "x"}, want: "--nats-token"},
		{name: "config with users and --no-auth", args: []string{"--config", users, "--no-auth"}, want: "--no-auth"},
		{name: "token and token file", args: []string{"--nats-token", "x", "--token-file", filepath.Join(dir, "tf")}, want: "--token-file"},
		{name: "--no-auth and a token", args: []string{"--no-auth", "--nats-token", "x"}, want: "--no-auth"},
		{name: "port taken", args: []string{"--nats-listen", taken}, want: "--nats-listen", wantErr: syscall.EADDRINUSE},
		{name: "port of the file taken", args: []string{"--config", listenTaken}, want: "listen in " + listenTaken, wantErr: syscall.EADDRINUSE},
		{name: "monitoring port taken", args: []string{"--nats-listen", "127.0.0.1:0", "--monitor-listen", taken}, want: "--monitor-listen", wantErr: syscall.EADDRINUSE},
		{name: "listen without a port", args: []string{"--nats-listen", "4222"}, want: "--nats-listen"},
		{name: "no payload", args: []string{"--max-payload", "0"}, want: "--max-payload"},
		{name: "config missing", args: []string{"--config", filepath.Join(dir, "missing.conf")}, want: "--config", wantErr: os.ErrNotExist},
		{name: "config unparsable", args: []string{"--config", writeConfig(t, "listen: {\n")}, want: "--config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "store")
			args := append([]string{"nats", "--data", data}, tt.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := execute(t, ctx, args...)
			if err == nil {
				t.Fatalf("toolbus %s = nil (output %q), want an error", strings.Join(args, " "), out)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("toolbus %s = %v, want %v", strings.Join(args, " "), err, tt.wantErr)
			}
			// One line that names what to change: no stack, no chain.
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("toolbus %s = %q, want one line naming %s", strings.Join(args, " "), msg, tt.want)
			}
			if strings.Contains(out, "ready") {
				t.Errorf("toolbus %s printed %q, want nothing ready", strings.Join(args, " "), out)
			}
			// A refused start leaves nothing behind.
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("toolbus %s left its store %s behind (%v)", strings.Join(args, " "), data, err)
			}
		})
	}
}

func TestNatsMonitoring(t *testing.T) {
	r, _ := runNats(t, "--monitor-listen", "127.0.0.1:0")
	healthz := r.waitFor(t, regexp.MustCompile(`monitoring: (http://\S+/healthz)\n`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := execute(t, ctx, "health", "--url", healthz); err != nil {
		t.Errorf("toolbus health --url %s = %v, want healthy", healthz, err)
	}
	stopNats(t, r)
}

func TestNatsAuthorizes(t *testing.T) {
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

func TestNatsShellQuote(t *testing.T) {
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
			if got := shellQuote(tt.in); got != tt.want {
				t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}
