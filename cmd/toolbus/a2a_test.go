package main

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/worker/a2abridge/a2abridgetest"
)

func TestA2ASend(t *testing.T) {
	streaming := a2abridgetest.Start(t)
	polling := a2abridgetest.Start(t, a2abridgetest.WithStreaming(false))
	guarded := a2abridgetest.Start(t, a2abridgetest.WithToken("s3cret"))

	tests := []struct {
		name    string
		args    []string
		wantErr error // clientcli.ErrReported, or nil for success; any error when anyErr
		anyErr  bool
		want    []*regexp.Regexp
	}{
		{name: "text over a stream", args: []string{"--url", streaming.Endpoint, "hello"},
			want: res(`(?m)^task \S+$`, `(?m)^completed +\[#{30}\] 100%$`, `(?m)^result:\n"hello"$`)},
		{name: "polling an agent that cannot stream", args: []string{"--url", polling.Endpoint, "--interval", "10ms", "--skill", "steps", "go"},
			want: res(`(?m)^completed +\[#{30}\] 100%$`, `(?m)^result:\n"done"$`)},
		{name: "data", args: []string{"--url", streaming.Endpoint, "--data", `{"n":1.5}`},
			want: res(`(?m)^result:\n\{\n  "n": 1.5\n\}$`)},
		{name: "a method and its params", args: []string{"--url", streaming.Endpoint, "--method", "echo", "--params", `{"a":1}`},
			want: res(`"method": "echo"`, `"params": \{\n\s+"a": 1\n\s+\}`)},
		{name: "a failed task", args: []string{"--url", streaming.Endpoint, "--skill", "fail", "pay"},
			wantErr: clientcli.ErrReported, want: res(`(?m)^failed +\[-{30}\]   0%  insufficient funds$`, `(?m)^task \S+ failed: insufficient funds$`)},
		{name: "a bearer token", args: []string{"--url", guarded.Endpoint, "--token", "s3cret", "--skill", "secret", "x"},
			want: res(`(?m)^result:\n"secret"$`)},
		{name: "no token", args: []string{"--url", guarded.Endpoint, "x"}, anyErr: true},
		{name: "params without a method", args: []string{"--url", streaming.Endpoint, "--params", `{}`}, anyErr: true},
		{name: "data that is not an object", args: []string{"--url", streaming.Endpoint, "--data", `[1]`}, anyErr: true},
		{name: "nothing to send", args: []string{"--url", streaming.Endpoint}, anyErr: true},
		{name: "not an http URL", args: []string{"--url", "ftp://127.0.0.1/a2a", "x"}, anyErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"a2a", "send"}, tt.args...)
			out, err := execute(t, context.Background(), args...)
			switch {
			case tt.anyErr:
				if err == nil {
					t.Fatalf("%q = nil error, want one; output:\n%s", args, out)
				}
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("%q = %v, want %v; output:\n%s", args, err, tt.wantErr, out)
			}
			for _, w := range tt.want {
				if !w.MatchString(out) {
					t.Errorf("%q printed:\n%s\nwant it to match %s", args, out, w)
				}
			}
		})
	}
}

func TestA2ASendCancelsTheTaskWhenInterrupted(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "streaming", false: "polling"}[streaming], func(t *testing.T) {
			agent := a2abridgetest.Start(t, a2abridgetest.WithStreaming(streaming))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := execute(t, ctx, "a2a", "send", "--url", agent.Endpoint, "--interval", "10ms", "--skill", "wait", "x")
				done <- err
			}()
			var started string
			select {
			case id := <-agent.Started:
				started = string(id)
			case <-time.After(10 * time.Second):
				t.Fatal("the task did not start within 10s")
			}
			cancel()
			select {
			case id := <-agent.Canceled:
				if string(id) != started {
					t.Errorf("canceled task %s, want %s", id, started)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the task was not canceled within 10s")
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("a2a send = %v, want canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a2a send did not return within 10s")
			}
		})
	}
}

func TestWorkerBridgesAnA2AAgent(t *testing.T) {
	agent := a2abridgetest.Start(t)
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--data", t.TempDir(),
		"--a2a-url", agent.URL, "--a2a-prefix", "agent")
	url := dev.waitFor(t, readyLine)

	out, err := execute(t, context.Background(), "call", "--url", url, "agent.echo", `{"text":"via dev"}`)
	if err != nil || !regexp.MustCompile(`"result": "via dev"`).MatchString(out) {
		t.Fatalf("call agent.echo = %v; output:\n%s", err, out)
	}
	out, err = execute(t, context.Background(), "jobs", "submit", "--url", url, "--wait", "--interval", "10ms",
		"agent.steps", `{"text":"go"}`)
	if err != nil || !regexp.MustCompile(`(?m)^result:\n"done"$`).MatchString(out) {
		t.Fatalf("jobs submit --wait agent.steps = %v; output:\n%s", err, out)
	}
}
