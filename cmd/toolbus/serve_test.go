package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

var (
	readyLine = regexp.MustCompile(`toolbus dev ready: (http://\S+/rpc)\n`)
	natsLine  = regexp.MustCompile(`embedded NATS: (nats://\S+)\n`)
	// joinLine is the command the ready lines give for a worker to join;
	// its group is the token.
	joinLine = regexp.MustCompile(`\n  toolbus worker --nats nats://\S+ --nats-token (\S+)\n`)
)

// running is a command started by runCommand.
type running struct {
	out    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when the command has ended
	err    error         // what the command ended with; read after done
}

// runCommand starts the toolbus command line args in a goroutine, with a
// context whose cancellation stops it as SIGINT would. The command is
// stopped when the test ends.
func runCommand(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{out: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	cmd := start(t, r.out, args...)
	go func() {
		defer close(r.done)
		r.err = cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		if err := r.stop(); errors.Is(err, errStillRunning) {
			t.Errorf("toolbus %s: %v", strings.Join(args, " "), err)
		}
	})
	return r
}

var errStillRunning = errors.New("still running 30s after it was stopped")

// stop stops the command and returns what it ended with, or
// errStillRunning when it does not end within a generous bound.
func (r *running) stop() error {
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		return errStillRunning
	}
}

// waitFor waits until re matches the command's output and returns the
// match's first group.
func (r *running) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	return r.out.waitFor(t, re, r.done, func() error { return r.err })
}

// postEcho sends an echo call to url and returns the response.
func postEcho(t *testing.T, url string) schema.Response {
	t.Helper()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	resp, err := client.Post(url, "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":"dev-1","method":"echo","params":{"hello":"dev"}}`))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s = HTTP %d %s, want 200", url, resp.StatusCode, data)
	}
	var r schema.Response
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("answer %s: %v", data, err)
	}
	return r
}

func TestDev(t *testing.T) {
	data := t.TempDir()
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data", data)
	url := dev.waitFor(t, readyLine)
	natsURL := dev.waitFor(t, natsLine)
	token := dev.waitFor(t, joinLine)
	if want := "toolbus worker --nats " + natsURL + " --nats-token " + token + "\n"; !strings.Contains(dev.out.String(), want) {
		t.Errorf("dev printed:\n%s\nwant the line %q", dev.out.String(), want)
	}

	r := postEcho(t, url)
	if r.Error != nil {
		t.Fatalf("echo via dev = error %v, want a result", r.Error)
	}
	if got, want := string(r.ID), `"dev-1"`; got != want {
		t.Errorf("echo via dev id = %s, want %s", got, want)
	}
	var result map[string]string
	if err := json.Unmarshal(r.Result, &result); err != nil || result["hello"] != "dev" {
		t.Errorf("echo via dev result = %s, want {\"hello\":\"dev\"}", r.Result)
	}

	// The TCP port takes no client without the token.
	t.Run("no token", func(t *testing.T) {
		for _, opts := range [][]bus.Option{nil, {bus.WithToken(token + "x")}} {
			nc, err := bus.Connect(natsURL, opts...)
			if err == nil {
				nc.Close()
				t.Fatalf("connect to dev's NATS with %d options and no right token succeeded, want a refusal", len(opts))
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("connect without the right token = %v, want %v", err, nats.ErrAuthorization)
			}
		}
	})

	// A worker process joins over the embedded server's TCP port with the
	// printed token. It serves its own prefix, so an answer can only come
	// from it.
	t.Run("worker joins", func(t *testing.T) {
		w := runCommand(t, "worker", "--nats", natsURL, "--nats-token", token, "--prefix", "joined", "--tools", "demo", "--metrics-listen", "127.0.0.1:0")
		nc, err := bus.Connect(natsURL, bus.WithName("toolbus-test"), bus.WithToken(token))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		reply := requestUntilServed(t, nc, "joined", w.done)
		if reply.Error != nil {
			t.Fatalf("echo via the joined worker = error %d %s, want a result", reply.Error.Code, reply.Error.Message)
		}
		if got, want := string(reply.Result), `{"joined":true}`; got != want {
			t.Errorf("echo via the joined worker = %s, want %s", got, want)
		}
		if err := w.stop(); err != nil {
			t.Errorf("worker stopped with %v, want nil", err)
		}
	})

	if err := dev.stop(); err != nil {
		t.Errorf("dev stopped with %v, want nil", err)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) == 0 {
		t.Errorf("--data %s holds %d entries (%v), want the JetStream store", data, len(entries), err)
	}
}

// requestUntilServed sends an echo call on the bus under prefix until a
// worker answers, and returns the reply.
func requestUntilServed(t *testing.T, nc *nats.Conn, prefix string, done <-chan struct{}) *schema.ReplyEnvelope {
	t.Helper()
	subjects, err := bus.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call("echo")
	if err != nil {
		t.Fatal(err)
	}
	giveUp := time.Now().Add(30 * time.Second)
	for {
		env := &schema.CallEnvelope{Version: schema.EnvelopeVersion, ID: []byte("1"), Method: "echo", Params: []byte(`{"joined":true}`)}
		msg, err := bus.CallMsg(subject, env, time.Now().Add(10*time.Second), "")
		if err != nil {
			t.Fatal(err)
		}
		answer, err := nc.RequestMsg(msg, 10*time.Second)
		if err == nil {
			reply, err := bus.ReadReply(answer)
			if err == nil {
				return reply
			}
			if !errors.Is(err, bus.ErrNoResponders) {
				t.Fatalf("reply on %s: %v", subject, err)
			}
		} else if !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request on %s: %v", subject, err)
		}
		select {
		case <-done:
			t.Fatal("worker ended before serving")
		default:
		}
		if time.Now().After(giveUp) {
			t.Fatalf("no worker served %s within 30s", subject)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDevWithoutNATSListener(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "")
	url := dev.waitFor(t, readyLine)
	if r := postEcho(t, url); r.Error != nil {
		t.Errorf("echo via dev = error %v, want a result", r.Error)
	}
	if err := dev.stop(); err != nil {
		t.Errorf("dev stopped with %v, want nil", err)
	}
	if out := dev.out.String(); natsLine.MatchString(out) || strings.Contains(out, "nats://") {
		t.Errorf("dev --nats-listen \"\" printed:\n%s\nwant no NATS URL", out)
	}
}

// TestDevChosenToken checks that --nats-token closes the TCP port with the
// token given, and that the join line carries it and the prefix.
func TestDevChosenToken(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--nats-token", "chosen-token", "--prefix", "acme", "--jobs=false")
	natsURL := dev.waitFor(t, natsLine)
	dev.waitFor(t, readyLine)
	if want := "toolbus worker --nats " + natsURL + " --nats-token chosen-token --prefix acme\n"; !strings.Contains(dev.out.String(), want) {
		t.Errorf("dev printed:\n%s\nwant the line %q", dev.out.String(), want)
	}
	nc, err := bus.Connect(natsURL, bus.WithToken("chosen-token"))
	if err != nil {
		t.Fatalf("connect with the chosen token: %v", err)
	}
	nc.Close()
	if err := dev.stop(); err != nil {
		t.Errorf("dev stopped with %v, want nil", err)
	}
}

func TestFlagErrors(t *testing.T) {
	// Nothing listens on port 1: a command that got as far as connecting
	// would fail there instead of on its flags.
	const noNATS = "nats://127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		want string // a part of the error message
	}{
		{name: "worker unknown toolset", args: []string{"worker", "--nats", noNATS, "--tools", "nope"}, want: `"nope"`},
		{name: "worker one unknown toolset of two", args: []string{"worker", "--nats", noNATS, "--tools", "demo,nope"}, want: `"nope"`},
		{name: "worker no toolset", args: []string{"worker", "--nats", noNATS, "--tools", ""}, want: "--tools"},
		{name: "dev unknown toolset", args: []string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--tools", "nope"}, want: `"nope"`},
		{name: "worker log level", args: []string{"worker", "--nats", noNATS, "--log-level", "loud"}, want: "--log-level"},
		{name: "ingress log level", args: []string{"ingress", "--nats", noNATS, "--log-level", "loud"}, want: "--log-level"},
		{name: "ingress log format", args: []string{"ingress", "--nats", noNATS, "--log-format", "xml"}, want: "--log-format"},
		{name: "worker concurrency not a number", args: []string{"worker", "--nats", noNATS, "--concurrency", "many"}, want: "--concurrency"},
		{name: "ingress unknown flag", args: []string{"ingress", "--nats", noNATS, "--max-bodybytes", "1"}, want: "--max-bodybytes"},
		{name: "worker takes no arguments", args: []string{"worker", "--nats", noNATS, "extra"}, want: "extra"},
		{name: "worker fetch allowlist", args: []string{"worker", "--nats", noNATS, "--fetch-allow", "*.internal"}, want: "--fetch-allow"},
		{name: "ingress callback allowlist", args: []string{"ingress", "--nats", noNATS, "--auth", "off", "--callback-allow", "10.0.0.0/33"}, want: "--callback-allow"},
		{name: "dev callback allowlist", args: []string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--callback-allow", "http://hooks/"}, want: "--callback-allow"},
		{name: "worker inbox prefix with a wildcard", args: []string{"worker", "--nats", noNATS, "--nats-inbox-prefix", "_INBOX.>"}, want: "--nats-inbox-prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := execute(t, ctx, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("toolbus %s = %v, want an error naming %s", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
}

// TestDevAllowlists: the demo tool fetch_page and job callbacks reach a
// receiver on loopback only through --fetch-allow and --callback-allow.
func TestDevAllowlists(t *testing.T) {
	secret := "0123456789abcdef-secret"
	type delivery struct {
		header http.Header
		body   []byte
	}
	delivered := make(chan delivery, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			io.WriteString(w, "<title>Inside</title><p>allowed</p>")
		case "/hook":
			body, _ := io.ReadAll(r.Body)
			select {
			case delivered <- delivery{r.Header.Clone(), body}:
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s reached, want it refused", r.URL)
	}))
	t.Cleanup(other.Close)
	addr := srv.Listener.Addr().String()

	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "",
		"--fetch-allow", addr, "--callback-secret", secret, "--callback-allow", addr)
	url := dev.waitFor(t, readyLine)

	r := call(t, url, `{"jsonrpc":"2.0","id":1,"method":"fetch_page","params":{"url":"`+srv.URL+`/page"}}`)
	if r.Error != nil || !strings.Contains(string(r.Result), "allowed") {
		t.Errorf("fetch_page of the allowed receiver = %s %v, want its page", r.Result, r.Error)
	}
	r = call(t, url, `{"jsonrpc":"2.0","id":2,"method":"fetch_page","params":{"url":"`+other.URL+`/page"}}`)
	if r.Error == nil || r.Error.Code != schema.CodeInvalidParams || !strings.Contains(r.Error.Message, "--fetch-allow") {
		t.Errorf("fetch_page of another loopback server = %s %v, want -32602 naming --fetch-allow", r.Result, r.Error)
	}
	r = call(t, url, `{"jsonrpc":"2.0","id":3,"method":"rpc.jobs.submit","params":{"method":"echo","notify_url":"`+other.URL+`/hook"}}`)
	if r.Error == nil || r.Error.Code != schema.CodeInvalidParams || !strings.Contains(r.Error.Message, "--callback-allow") {
		t.Errorf("submit with a notify_url on another loopback server = %s %v, want -32602 naming --callback-allow", r.Result, r.Error)
	}
	r = call(t, url, `{"jsonrpc":"2.0","id":4,"method":"rpc.jobs.submit","params":{"method":"echo","params":{"a":1},"notify_url":"`+srv.URL+`/hook"}}`)
	if r.Error != nil {
		t.Fatalf("submit with an allowed notify_url = %v", r.Error)
	}
	select {
	case d := <-delivered:
		if err := jobs.Verify([]byte(secret), d.header, d.body, time.Now(), jobs.ReplayWindow); err != nil {
			t.Errorf("the callback's signature: %v", err)
		}
	case <-dev.done:
		t.Fatalf("dev ended before the callback: %v", dev.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no callback within 30s")
	}
}
