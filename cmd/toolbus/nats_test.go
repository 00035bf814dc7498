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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/natsd"
)

var natsReadyLine = regexp.MustCompile(`toolbus nats ready: (nats://\S+)\n`)

// runNats runs `toolbus nats` with args on a free loopback port, its store
// in a temporary directory, and returns it once it is ready, with its URL.
func runNats(t *testing.T, args ...string) (*running, string) {
	t.Helper()
	return runNatsIn(t, t.TempDir(), args...)
}

// runNatsIn is runNats with its store in data. args may name another
// --nats-listen.
func runNatsIn(t *testing.T, data string, args ...string) (*running, string) {
	t.Helper()
	r := runCommand(t, append([]string{"nats", "--nats-listen", "127.0.0.1:0", "--data", data}, args...)...)
	return r, r.waitFor(t, natsReadyLine)
}

// joinCommand returns the command line the ready lines of r give to join
// part (ingress or worker), parsed as that command parses it, after
// checking that it names url.
func joinCommand(t *testing.T, r *running, url, part string) *cobra.Command {
	t.Helper()
	line := r.waitFor(t, regexp.MustCompile(`(?m)^  toolbus (`+part+` --nats .*)$`))
	args := strings.Fields(line)
	cmd := subcommand(t, args[1:], args[0])
	if got, err := cmd.Flags().GetString("nats"); err != nil || got != url {
		t.Errorf("toolbus %s: --nats %s (%v), want %s", line, got, err, url)
	}
	return cmd
}

// joinAs returns the user and password the ready lines of r give part,
// read as the part reads them, after checking that the password is kept
// in data in a file only this user may read.
func joinAs(t *testing.T, r *running, url, data, part string) (user, password string) {
	t.Helper()
	cmd := joinCommand(t, r, url, part)
	var a bus.RemoteConfig
	var err error
	for flag, v := range map[string]*string{"nats-user": &a.User, "nats-password-file": &a.PasswordFile, "nats-token": &a.Token} {
		if *v, err = cmd.Flags().GetString(flag); err != nil {
			t.Fatal(err)
		}
	}
	if a.User != part || a.Token != "" {
		t.Errorf("toolbus %s joins as --nats-user %q --nats-token %q, want the user %s and no token", part, a.User, a.Token, part)
	}
	if dir := filepath.Dir(a.PasswordFile); !filepath.IsAbs(a.PasswordFile) || dir != data {
		t.Errorf("toolbus %s --nats-password-file %s, want an absolute path in %s", part, a.PasswordFile, data)
	}
	if fi, err := os.Stat(a.PasswordFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("--nats-password-file %s mode = %v (%v), want -rw-------", a.PasswordFile, fi.Mode(), err)
	}
	if password, err = a.ReadPasswordFile(); err != nil {
		t.Fatalf("toolbus %s: %v", part, err)
	}
	return a.User, password
}

// permissionErrors connects to url as user and returns the connection
// and the permission violations the server reports to it.
func permissionErrors(t *testing.T, url, user, password string, opts ...nats.Option) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc := dialNats(t, url, append([]nats.Option{nats.UserInfo(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})}, opts...)...)
	return nc, errs
}

// refused checks that the server reports a permission violation to the
// connection of errs for what it just did.
func refused(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%s = %v, want %v", what, err, nats.ErrPermissionViolation)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no error after 30s, want %v", what, nats.ErrPermissionViolation)
	}
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
	useBucket(t, nc, "natstest")
}

// useBucket is useJetStream in the bucket named bucket.
func useBucket(t *testing.T, nc *nats.Conn, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: time.Minute})
	if err != nil {
		t.Fatalf("CreateKeyValue(%s): %v", bucket, err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + bucket + ".k", Data: []byte("v")}, jetstream.WithMsgTTL(time.Hour)); err != nil {
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

func TestNatsRoleUsers(t *testing.T) {
	data := t.TempDir()
	r, url := runNatsIn(t, data)
	if out := r.out.String(); strings.Contains(out, "--nats-token") {
		t.Errorf("ready lines %q give a token, want the users ingress and worker", out)
	}
	ingressUser, ingressPass := joinAs(t, r, url, data, "ingress")
	workerUser, workerPass := joinAs(t, r, url, data, "worker")
	for _, p := range []string{ingressPass, workerPass} {
		if !regexp.MustCompile(`^p[0-9a-f]{64}$`).MatchString(p) {
			t.Errorf("generated password %q, want p and 32 random bytes in hex", p)
		}
	}
	if ingressPass == workerPass {
		t.Error("the ingress and the worker have the same password, want one each")
	}

	refusedByNats(t, url)
	refusedByNats(t, url, nats.Token(ingressPass))
	refusedByNats(t, url, nats.UserInfo(workerUser, ingressPass))

	// A worker started with its printed line serves the calls the ingress
	// user publishes.
	args := strings.Fields(r.waitFor(t, regexp.MustCompile(`(?m)^  toolbus (worker --nats .*)$`)))
	worker := runCommand(t, append(args, "--metrics-listen", "127.0.0.1:0")...)
	ingress, ingressErrs := permissionErrors(t, url, ingressUser, ingressPass)
	if reply := requestUntilServed(t, ingress, bus.DefaultPrefix, worker.done); reply.Error != nil {
		t.Fatalf("echo reply error = %v, want none", reply.Error)
	}
	// The ingress keeps toolbus's buckets, with the TTLs job records need.
	useBucket(t, ingress, "toolbus_idem")
	// It hears the workers' answers to its calls (protocol revision 10).
	if err := bus.CheckSubscribe(context.Background(), ingress, "toolbus.reply."+bus.ReplyToken()+".*"); err != nil {
		t.Errorf("the ingress listens for the answers to its calls: %v", err)
	}
	if _, err := ingress.QueueSubscribe("toolbus.call.>", "toolbus-workers", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	refused(t, ingressErrs, "the ingress takes calls")

	// What the finding was about: a worker's credential can publish no
	// call, so no call as any caller, and reach no job record.
	rogue, workerErrs := permissionErrors(t, url, workerUser, workerPass, nats.CustomInboxPrefix(bus.WorkerInboxPrefix))
	for _, tt := range []struct {
		name string
		do   func() error
	}{
		{"the worker publishes a call", func() error { return rogue.Publish("toolbus.call.echo", nil) }},
		{"the worker reads a job record", func() error { return rogue.Publish("$JS.API.DIRECT.GET.KV_toolbus_jobs.$KV.toolbus_jobs.x", nil) }},
		{"the worker asks JetStream", func() error { return rogue.Publish("$JS.API.INFO", nil) }},
		{"the worker takes calls outside the queue group", func() error {
			_, err := rogue.Subscribe("toolbus.call.>", func(*nats.Msg) {})
			return err
		}},
		{"the worker reads the ingress's replies", func() error {
			_, err := rogue.Subscribe("_INBOX.>", func(*nats.Msg) {})
			return err
		}},
		{"the worker reads the answers to the ingress's calls", func() error {
			_, err := rogue.Subscribe("toolbus.reply.>", func(*nats.Msg) {})
			return err
		}},
	} {
		if err := tt.do(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if err := rogue.Flush(); err != nil {
			t.Fatalf("%s: flush: %v", tt.name, err)
		}
		refused(t, workerErrs, tt.name)
	}
	if err := worker.stop(); err != nil {
		t.Errorf("worker stopped with %v, want nil", err)
	}
	stopNats(t, r)
}

func TestNatsRoleUsersSurviveARestart(t *testing.T) {
	data := t.TempDir()
	r, url := runNatsIn(t, data)
	_, ingressPass := joinAs(t, r, url, data, "ingress")
	_, workerPass := joinAs(t, r, url, data, "worker")
	if out := r.out.String(); !strings.Contains(out, "passwords made now") {
		t.Errorf("first start printed %q, want it to say the passwords were made now", out)
	}

	// A worker's connection, with a queue subscription as a worker has,
	// that keeps reconnecting while the server is away.
	reconnected := make(chan struct{}, 1)
	worker := dialNats(t, url, nats.UserInfo("worker", workerPass), nats.CustomInboxPrefix(bus.WorkerInboxPrefix),
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	if _, err := worker.QueueSubscribe("toolbus.call.>", "toolbus-workers", func(m *nats.Msg) { m.Respond([]byte("served")) }); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	stopNats(t, r)

	// The same store on the same address, as a restart runs it.
	r, url = runNatsIn(t, data, "--nats-listen", strings.TrimPrefix(url, "nats://"))
	if _, p := joinAs(t, r, url, data, "ingress"); p != ingressPass {
		t.Errorf("ingress password after a restart = %q, want %q unchanged", p, ingressPass)
	}
	if _, p := joinAs(t, r, url, data, "worker"); p != workerPass {
		t.Errorf("worker password after a restart = %q, want %q unchanged", p, workerPass)
	}
	if out := r.out.String(); !strings.Contains(out, "passwords kept from an earlier start") {
		t.Errorf("a restart printed %q, want it to say the passwords were kept", out)
	}
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker's connection did not reconnect within 30s (status %v, last error %v)", worker.Status(), worker.LastError())
	}
	ingress := dialNats(t, url, nats.UserInfo("ingress", ingressPass))
	answer, err := ingress.Request("toolbus.call.echo", nil, 30*time.Second)
	if err != nil || string(answer.Data) != "served" {
		t.Fatalf("call after the restart = %v, %v, want the reconnected worker's answer", answer, err)
	}
	stopNats(t, r)
}

func TestNatsKeepsAGivenPassword(t *testing.T) {
	data := t.TempDir()
	path := filepath.Join(data, "worker.password")
	if err := os.WriteFile(path, []byte("my-own-worker-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, url := runNatsIn(t, data)
	if _, p := joinAs(t, r, url, data, "worker"); p != "my-own-worker-pass" {
		t.Errorf("worker password = %q, want the one in %s", p, path)
	}
	dialNats(t, url, nats.UserInfo("worker", "my-own-worker-pass"), nats.CustomInboxPrefix(bus.WorkerInboxPrefix))
	stopNats(t, r)
}

func TestNatsPasswordFileRefused(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(path string) error // makes the ingress's password file unusable
		wantErr error
	}{
		{name: "empty", prepare: func(path string) error { return os.WriteFile(path, []byte("\n"), 0o600) }},
		{name: "a directory", prepare: func(path string) error { return os.Mkdir(path, 0o700) }, wantErr: syscall.EISDIR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			path := filepath.Join(data, "ingress.password")
			if err := tt.prepare(path); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := execute(t, ctx, "nats", "--nats-listen", "127.0.0.1:0", "--data", data)
			if err == nil {
				t.Fatalf("toolbus nats with %s %s = nil (output %q), want an error", tt.name, path, out)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("toolbus nats with %s %s = %v, want %v", tt.name, path, err, tt.wantErr)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || strings.Contains(msg, "\n") {
				t.Errorf("toolbus nats with %s %s = %q, want one line naming the file", tt.name, path, msg)
			}
			if strings.Contains(out, "ready") {
				t.Errorf("toolbus nats printed %q, want nothing ready", out)
			}
		})
	}
}

func TestNatsToken(t *testing.T) {
	token := bus.NewToken()
	r, url := runNats(t, "--nats-token", token)
	if out := r.out.String(); !strings.Contains(out, allPowerful) {
		t.Errorf("ready lines %q, want them to say %q", out, allPowerful)
	}
	refusedByNats(t, url)
	refusedByNats(t, url, nats.Token("not-"+token))
	useJetStream(t, dialNats(t, url, nats.Token(token)))

	// The printed lines are command lines of the ingress and the worker
	// whose NATS flags open a connection, as those commands open it.
	for _, part := range []string{"ingress", "worker"} {
		cmd := joinCommand(t, r, url, part)
		tok, err := cmd.Flags().GetString("nats-token")
		if err != nil {
			t.Fatal(err)
		}
		if tok != token {
			t.Errorf("toolbus %s --nats-token %s, want the token %s", part, tok, token)
		}
		nc, err := bus.Connect(url, bus.WithName("toolbus-"+part), bus.WithToken(tok))
		if err != nil {
			t.Fatalf("toolbus %s: connect: %v", part, err)
		}
		nc.Close()
	}
	stopNats(t, r)
}

func TestDevSaysWhatItsTokenAllows(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data", t.TempDir())
	dev.waitFor(t, joinLine)
	if want := allPowerful + ";\n" + devTokenUse + "\n"; !strings.Contains(dev.out.String(), want) {
		t.Errorf("dev printed:\n%s\nwant under the join line:\n%s", dev.out.String(), want)
	}
	if err := dev.stop(); err != nil {
		t.Errorf("dev stopped with %v, want nil", err)
	}
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
	if want := `--token-file ` + path; !strings.Contains(out, want) {
		t.Errorf("ready lines %q, want them to read the token with %s", out, want)
	}
	if !strings.Contains(out, "(made now") {
		t.Errorf("ready lines %q, want them to say the token was made now", out)
	}
	if !strings.Contains(out, allPowerful) {
		t.Errorf("ready lines %q, want them to say %q", out, allPowerful)
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
	if out := r.out.String(); !strings.Contains(out, "(kept in the file from an earlier start)") {
		t.Errorf("ready lines after a restart %q, want them to say the token was kept", out)
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

func TestNatsFlagsBindTheConfig(t *testing.T) {
	cfg := natsd.DefaultConfig()
	fl := pflag.NewFlagSet("nats", pflag.ContinueOnError)
	bindNatsFlags(fl, &cfg)
	if err := fl.Parse([]string{"--nats-listen", "127.0.0.1:0", "--data", "/d", "--config", "n.conf", "--nats-token", "t", "--token-file", "tf", "--monitor-listen", ":8222", "--max-payload", "7", "--no-auth"}); err != nil {
		t.Fatal(err)
	}
	got := natsConfig(fl.Changed, cfg)
	want := natsd.Config{
		Listen: "127.0.0.1:0", Data: "/d", File: "n.conf", Token: "t", TokenFile: "tf", Monitor: ":8222", MaxPayload: 7, NoAuth: true,
		Overrides: natsd.Overrides{Listen: true, Monitor: true, Data: true, MaxPayload: true},
	}
	if got != want {
		t.Errorf("natsConfig() = %+v, want %+v", got, want)
	}
	// A flag left alone keeps the default and fills in only what the file
	// leaves out.
	cfg = natsd.DefaultConfig()
	fl = pflag.NewFlagSet("nats", pflag.ContinueOnError)
	bindNatsFlags(fl, &cfg)
	if got, want := natsConfig(fl.Changed, cfg), natsd.DefaultConfig(); got != want {
		t.Errorf("natsConfig() without flags = %+v, want %+v", got, want)
	}
}
