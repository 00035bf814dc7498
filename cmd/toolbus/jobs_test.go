package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// submitJob runs `jobs submit` and returns the job's id.
func submitJob(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, err := execute(t, context.Background(), append([]string{"jobs", "submit", "--url", url}, args...)...)
	if err != nil {
		t.Fatalf("jobs submit %q = %v; output:\n%s", args, err, out)
	}
	var sub schema.JobSubmitResult
	if err := json.Unmarshal([]byte(out), &sub); err != nil {
		t.Fatalf("jobs submit %q printed %q: %v", args, out, err)
	}
	// A repeated idempotency key answers the first job in its state now.
	if sub.ID == "" || sub.State == "" {
		t.Fatalf("jobs submit %q printed %+v, want an id and a state", args, sub)
	}
	return sub.ID
}

func TestJobs(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	wsURL := "ws" + strings.TrimPrefix(c.URL, "http")
	done := submitJob(t, c.URL, "echo", `{"hello":"jobs"}`)
	if out, err := execute(t, context.Background(), "jobs", "watch", "--url", c.URL, "--interval", "10ms", done); err != nil {
		t.Fatalf("jobs watch %s = %v; output:\n%s", done, err, out)
	}
	running := submitJob(t, c.URL, "sleep", `{"ms":60000}`)
	t.Cleanup(func() {
		execute(t, context.Background(), "jobs", "cancel", "--url", c.URL, running)
	})

	tests := []struct {
		name    string
		args    []string
		wantErr error // clientcli.ErrReported, a schema error, or nil for success
		want    []*regexp.Regexp
	}{
		{name: "get prints the record", args: []string{"jobs", "get", "--url", c.URL, done},
			want: res(`"id": "`+done+`"`, `"state": "succeeded"`, `"hello": "jobs"`)},
		{name: "get over WebSocket", args: []string{"jobs", "get", "--url", wsURL, done},
			want: res(`"state": "succeeded"`)},
		{name: "get of an unknown job", args: []string{"jobs", "get", "--url", c.URL, "00000000000000000000000000"},
			wantErr: schema.ErrJobNotFound},
		{name: "cancel of a job that succeeded", args: []string{"jobs", "cancel", "--url", c.URL, done},
			wantErr: schema.ErrInvalidParams},
		{name: "watch of a job that succeeded", args: []string{"jobs", "watch", "--url", c.URL, "--interval", "10ms", done},
			want: res(`(?m)^succeeded +\[#{30}\] 100%$`, `(?m)^result:\n\{\n  "hello": "jobs"\n\}$`)},
		{name: "submit --wait of a failing job", args: []string{"jobs", "submit", "--url", c.URL, "--wait", "--interval", "10ms",
			"fail", `{"code":2001,"message":"insufficient funds"}`},
			wantErr: clientcli.ErrReported, want: res(`"id": "\w+"`, `(?m)^failed `, `job \w+ failed:`, `"code": 2001`, "insufficient funds")},
		{name: "submit --wait over WebSocket", args: []string{"jobs", "submit", "--url", wsURL, "--wait", "--interval", "10ms",
			"sleep", `{"ms":50}`},
			want: res(`(?m)^succeeded `, `"slept_ms": 50`)},
		{name: "list prints a table and a cursor", args: []string{"jobs", "list", "--url", c.URL, "--limit", "1"},
			want: res(`(?m)^ID +STATE +METHOD +PROGRESS +ATTEMPTS +CREATED +FINISHED$`, `(?m)^more jobs: toolbus jobs list --cursor \S+$`)},
		{name: "list filters by state", args: []string{"jobs", "list", "--url", c.URL, "--state", "running"},
			want: res(`(?m)^` + running + ` +running +sleep `)},
		{name: "list of a method with no jobs", args: []string{"jobs", "list", "--url", c.URL, "--method", "no.such.tool"},
			want: res(`(?m)^no jobs$`)},
		{name: "list with a bad state", args: []string{"jobs", "list", "--url", c.URL, "--state", "sleeping"},
			wantErr: schema.ErrInvalidParams},
		{name: "submit of an rpc method", args: []string{"jobs", "submit", "--url", c.URL, "rpc.jobs.list"},
			wantErr: schema.ErrInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execute(t, context.Background(), tt.args...)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("%q = %v, want %v; output:\n%s", tt.args, err, tt.wantErr, out)
			}
			for _, w := range tt.want {
				if !w.MatchString(out) {
					t.Errorf("%q printed:\n%s\nwant it to match %s", tt.args, out, w)
				}
			}
		})
	}
}

func res(patterns ...string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		out[i] = regexp.MustCompile(p)
	}
	return out
}

func TestJobsListPages(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	ids := map[string]bool{}
	for range 3 {
		ids[submitJob(t, c.URL, "echo", `[1]`)] = true
	}
	seen := map[string]bool{}
	cursorRe := regexp.MustCompile(`(?m)^more jobs: toolbus jobs list --cursor (\S+)$`)
	args := []string{"jobs", "list", "--url", c.URL, "--limit", "2"}
	for page := 1; ; page++ {
		out, err := execute(t, context.Background(), args...)
		if err != nil {
			t.Fatalf("%q = %v; output:\n%s", args, err, out)
		}
		for id := range ids {
			if strings.Contains(out, id) {
				if seen[id] {
					t.Errorf("page %d lists %s again", page, id)
				}
				seen[id] = true
			}
		}
		m := cursorRe.FindStringSubmatch(out)
		if m == nil {
			break
		}
		if page == 3 {
			t.Fatalf("three pages of 2 for 3 jobs; last:\n%s", out)
		}
		args = []string{"jobs", "list", "--url", c.URL, "--limit", "2", "--cursor", m[1]}
	}
	if len(seen) != len(ids) {
		t.Errorf("pages listed %d of the %d jobs", len(seen), len(ids))
	}
}

func TestJobsCancelAndWatch(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	id := submitJob(t, c.URL, "sleep", `{"ms":60000}`)

	var out syncBuffer
	watch := start(t, &out, "jobs", "watch", "--url", c.URL, "--interval", "10ms", id)
	watched := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		watched <- watch.ExecuteContext(context.Background())
		close(ended)
	}()
	out.waitFor(t, regexp.MustCompile(`(?m)^(running) `), ended, func() error { return <-watched })

	cancelOut, err := execute(t, context.Background(), "jobs", "cancel", "--url", c.URL, id)
	if err != nil {
		t.Fatalf("jobs cancel = %v; output:\n%s", err, cancelOut)
	}
	if !strings.Contains(cancelOut, `"state": "canceled"`) {
		t.Errorf("jobs cancel printed:\n%s\nwant the canceled record", cancelOut)
	}
	<-ended
	if err := <-watched; !errors.Is(err, clientcli.ErrReported) {
		t.Fatalf("jobs watch of a canceled job = %v, want %v; output:\n%s", err, clientcli.ErrReported, out.String())
	}
	got := out.String()
	for _, w := range res(`(?m)^canceled `, `job \w+ canceled:`, `"code": -32004`) {
		if !w.MatchString(got) {
			t.Errorf("jobs watch printed:\n%s\nwant it to match %s", got, w)
		}
	}
	lines := strings.Split(got, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" && lines[i] == lines[i-1] {
			t.Errorf("jobs watch printed %q twice in a row; it prints a line only when it changes", lines[i])
		}
	}
}

func TestJobsSubmitIdempotencyKey(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	first := submitJob(t, c.URL, "--idempotency-key", "k-1", "echo", `[1]`)
	second := submitJob(t, c.URL, "--idempotency-key", "k-1", "echo", `[1]`)
	other := submitJob(t, c.URL, "--idempotency-key", "k-2", "echo", `[1]`)
	if first != second {
		t.Errorf("two submits with key k-1 = %s, %s, want the same job", first, second)
	}
	if other == first {
		t.Errorf("submit with key k-2 = %s, want a job other than k-1's", other)
	}
}

func TestJobsURLFromEnvironment(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	id := submitJob(t, c.URL, "echo", `{"via":"env"}`)
	t.Setenv("TOOLBUS_URL", c.URL)
	out, err := execute(t, context.Background(), "jobs", "get", id)
	if err != nil {
		t.Fatalf("jobs get with TOOLBUS_URL = %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, `"via": "env"`) {
		t.Errorf("jobs get with TOOLBUS_URL printed:\n%s\nwant the job's params", out)
	}
}

func TestJobsUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "submit without a method", args: []string{"jobs", "submit"}},
		{name: "submit with params a number", args: []string{"jobs", "submit", "echo", "42"}},
		{name: "submit --wait with no interval", args: []string{"jobs", "submit", "--wait", "--interval", "0s", "echo"}},
		{name: "get without an id", args: []string{"jobs", "get"}},
		{name: "cancel with two ids", args: []string{"jobs", "cancel", "a", "b"}},
		{name: "watch with no interval", args: []string{"jobs", "watch", "--interval", "0s", "x"}},
		{name: "list with a negative limit", args: []string{"jobs", "list", "--limit", "-1"}},
		{name: "list with an argument", args: []string{"jobs", "list", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Nothing listens on port 1: a usage error must come before
			// any connection is tried.
			out, err := execute(t, context.Background(), append(tt.args, "--url", "http://127.0.0.1:1/rpc")...)
			if err == nil || errors.Is(err, clientcli.ErrReported) || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%q = %v, want a usage error; output:\n%s", tt.args, err, out)
			}
		})
	}
}
