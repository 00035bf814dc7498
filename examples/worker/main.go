// Command worker is a complete toolbus worker: two tools, served over NATS
// to any toolbus ingress. Copy it to start a worker of your own.
//
//   - text.count counts the words of a text. It is typed (the params are a
//     Go struct, answered -32602 when they do not fit), described for
//     discovery, and retry-safe: running it twice has the effect of
//     running it once, so the cluster may run it again after a crash.
//   - text.digest hashes a text many times over. It reports its progress
//     (a job's record shows it) and stops at once when its call is
//     canceled or passes its deadline.
//
// It connects as `toolbus worker` does, with the same flags and
// environment variables:
//
//	--nats                 TOOLBUS_NATS_URL            NATS server URL(s)
//	--nats-token           TOOLBUS_NATS_TOKEN          the token of `toolbus dev` or of `toolbus nats --token-file`
//	--token-file           TOOLBUS_TOKEN_FILE          a file holding that token
//	--nats-user            TOOLBUS_NATS_USER           a role user of `toolbus nats` ("worker")
//	--nats-password-file   TOOLBUS_NATS_PASSWORD_FILE  the file holding that user's password
//
// Run it against `toolbus dev` with the token that dev prints:
//
//	go run ./examples/worker --nats nats://127.0.0.1:4222 --nats-token <token>
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// config is how the worker reaches NATS.
type config struct {
	url, token, tokenFile, user, passwordFile string
}

// parse reads the flags, each defaulting to its environment variable.
func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&c.url, "nats", env("TOOLBUS_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated")
	fs.StringVar(&c.token, "nats-token", env("TOOLBUS_NATS_TOKEN", ""), "NATS authentication token")
	fs.StringVar(&c.tokenFile, "token-file", env("TOOLBUS_TOKEN_FILE", ""), "file holding the NATS authentication token")
	fs.StringVar(&c.user, "nats-user", env("TOOLBUS_NATS_USER", ""), "NATS user name (with --nats-password-file)")
	fs.StringVar(&c.passwordFile, "nats-password-file", env("TOOLBUS_NATS_PASSWORD_FILE", ""), "file holding the password of --nats-user")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	return c, nil
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// options turns c into the options of bus.Connect.
func (c config) options() ([]bus.Option, error) {
	if c.token != "" && c.tokenFile != "" {
		return nil, errors.New("--nats-token and --token-file both give the token: keep one of them")
	}
	if (c.user == "") != (c.passwordFile == "") {
		return nil, errors.New("--nats-user and --nats-password-file go together: give both, or neither")
	}
	if c.user != "" && (c.token != "" || c.tokenFile != "") {
		return nil, errors.New("give either a token or a user, not both")
	}
	opts := []bus.Option{bus.WithName("example-worker")}
	switch {
	case c.tokenFile != "":
		token, err := readSecret("--token-file", c.tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, bus.WithToken(token))
	case c.token != "":
		opts = append(opts, bus.WithToken(c.token))
	case c.user != "":
		password, err := readSecret("--nats-password-file", c.passwordFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, bus.WithUserPassword(c.user, password))
	}
	return opts, nil
}

func readSecret(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s %s: %w", flag, path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s %s is empty: put the secret on its first line", flag, path)
	}
	return s, nil
}

// run serves the tools until ctx ends, then drains: calls in flight
// finish (up to 30 s) before it returns.
func run(ctx context.Context, args []string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	nc, err := bus.Connect(c.url, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", bus.RedactURL(c.url), err)
	}
	defer nc.Close()
	rt, err := worker.New(nc, worker.WithLogger(slog.Default()))
	if err != nil {
		return err
	}
	if err := register(rt); err != nil {
		return err
	}
	if err := rt.Start(); err != nil {
		return err
	}
	slog.Info("serving text.count and text.digest", "nats", bus.RedactURL(c.url))
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return rt.Shutdown(drain)
}

// register adds the example's tools to rt.
func register(rt *worker.Runtime) error {
	err := rt.Handle("text.count", worker.Typed(count), worker.Describe(schema.Descriptor{
		Description: "Counts the words of a text, or its distinct words when unique is true.",
		RetrySafe:   true,
	}))
	if err != nil {
		return err
	}
	return rt.Handle("text.digest", worker.Typed(digest), worker.Describe(schema.Descriptor{
		Description: "Hashes a text with SHA-256 the given number of rounds (1 to 10,000,000), reporting progress.",
	}))
}

// CountParams are the params of text.count. A field without omitempty is
// required: {} is answered -32602 naming /text.
type CountParams struct {
	Text   string `json:"text" jsonschema:"the text whose words are counted"`
	Unique bool   `json:"unique,omitempty" jsonschema:"count each distinct word once"`
}

// CountResult is the result of text.count.
type CountResult struct {
	Words int `json:"words"`
}

func count(_ context.Context, p CountParams) (CountResult, error) {
	words := strings.Fields(p.Text)
	if !p.Unique {
		return CountResult{Words: len(words)}, nil
	}
	seen := map[string]bool{}
	for _, w := range words {
		seen[strings.ToLower(w)] = true
	}
	return CountResult{Words: len(seen)}, nil
}

// DigestParams are the params of text.digest.
type DigestParams struct {
	Text   string `json:"text" jsonschema:"the text to hash"`
	Rounds int    `json:"rounds" jsonschema:"how many times to hash, 1 to 10000000"`
}

// DigestResult is the result of text.digest.
type DigestResult struct {
	SHA256 string `json:"sha256"`
}

// maxRounds bounds text.digest's work.
const maxRounds = 10_000_000

func digest(ctx context.Context, p DigestParams) (DigestResult, error) {
	if p.Rounds < 1 || p.Rounds > maxRounds {
		return DigestResult{}, worker.InvalidParams("/rounds", fmt.Sprintf("must be from 1 to %d", maxRounds))
	}
	sum := sha256.Sum256([]byte(p.Text))
	step := max(p.Rounds/100, 1)
	for i := 1; i < p.Rounds; i++ {
		if i%step == 0 {
			// A canceled call, or one past its deadline, stops here; the
			// runtime answers it -32004 or -32001.
			if err := ctx.Err(); err != nil {
				return DigestResult{}, err
			}
			worker.Progress(ctx, 100*float64(i)/float64(p.Rounds), fmt.Sprintf("round %d of %d", i, p.Rounds))
		}
		sum = sha256.Sum256(sum[:])
	}
	return DigestResult{SHA256: hex.EncodeToString(sum[:])}, nil
}
