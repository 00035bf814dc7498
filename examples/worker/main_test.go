package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExampleWorker runs the example as its README walk-through does: the
// program joins a cluster's NATS over TCP with the token from a file, and
// its tools answer calls and run as jobs with progress and cancel.
func TestExampleWorker(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithoutWorker(), toolbustest.WithNATSListener(),
		toolbustest.WithDiscovery(), toolbustest.WithJobs())
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(c.NATS.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--nats", c.NATS.ClientURL(), "--token-file", tokenFile}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v, want a clean drain", err)
		}
	})
	toolbustest.Eventually(t, func() bool {
		return c.Call(t, "text.count", `{"text":"a"}`).Error == nil
	}, "the example worker serves text.count")

	for _, tc := range []struct {
		name, params string
		want         int
	}{
		{"words", `{"text":"the cat saw the dog"}`, 5},
		{"unique words", `{"text":"the cat saw The dog","unique":true}`, 4},
		{"no words", `{"text":"  "}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Call(t, "text.count", tc.params)
			var got CountResult
			if r.Error != nil || json.Unmarshal(r.Result, &got) != nil {
				t.Fatalf("text.count %s = %s %v, want a count", tc.params, r.Result, r.Error)
			}
			if got.Words != tc.want {
				t.Errorf("text.count %s = %d words, want %d", tc.params, got.Words, tc.want)
			}
		})
	}
	if r := c.Call(t, "text.count", `{"text":7}`); r.Error == nil || r.Error.Code != schema.CodeInvalidParams {
		t.Errorf("text.count with a number for text = %s %v, want -32602", r.Result, r.Error)
	}
	// text has no omitempty, so it is required: by the announced schema
	// at the ingress, and by the worker itself when nothing validates.
	if r := c.Call(t, "text.count", `{}`); r.Error == nil || r.Error.Code != schema.CodeInvalidParams || fieldOf(t, r.Error) != "/text" {
		t.Errorf("text.count of {} = %s %v, want -32602 naming /text", r.Result, r.Error)
	}
	if r := c.Call(t, "text.count", `{"text":"a b","unique":false}`); r.Error != nil {
		t.Errorf("text.count with unique = %v, want a count", r.Error)
	}
	if r := c.Call(t, "text.digest", `{"text":"x","rounds":0}`); r.Error == nil || r.Error.Code != schema.CodeInvalidParams {
		t.Errorf("text.digest of 0 rounds = %s %v, want -32602", r.Result, r.Error)
	}
	r := c.Call(t, "text.digest", `{"text":"abc","rounds":1}`)
	if r.Error != nil || string(r.Result) != `{"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}` {
		t.Errorf("text.digest of abc, 1 round = %s %v, want the SHA-256 of abc", r.Result, r.Error)
	}

	// A long digest runs as a job: its progress reaches the record, and a
	// cancel stops it.
	sub := c.Call(t, schema.MethodJobsSubmit, `{"method":"text.digest","params":{"text":"abc","rounds":10000000}}`)
	var job struct {
		ID string `json:"id"`
	}
	if sub.Error != nil || json.Unmarshal(sub.Result, &job) != nil || job.ID == "" {
		t.Fatalf("submit text.digest = %s %v, want a job id", sub.Result, sub.Error)
	}
	record := func() schema.JobRecord {
		r := c.Call(t, schema.MethodJobsGet, `{"id":"`+job.ID+`"}`)
		var rec schema.JobRecord
		if r.Error != nil || json.Unmarshal(r.Result, &rec) != nil {
			t.Fatalf("get job %s = %s %v", job.ID, r.Result, r.Error)
		}
		return rec
	}
	toolbustest.Eventually(t, func() bool {
		rec := record()
		return rec.State == schema.JobRunning && rec.Progress != nil && rec.Progress.Percent > 0
	}, "the digest job reports progress")
	if r := c.Call(t, schema.MethodJobsCancel, `{"id":"`+job.ID+`"}`); r.Error != nil {
		t.Fatalf("cancel job %s = %v", job.ID, r.Error)
	}
	toolbustest.Eventually(t, func() bool { return record().State == schema.JobCanceled }, "the digest job is canceled")
}

// TestCountRequiresText runs text.count's handler with no ingress in front
// of it, as a worker whose ingress does not validate params serves it.
func TestCountRequiresText(t *testing.T) {
	h := worker.Typed(count)
	for _, tc := range []struct {
		name, params, wantField string
	}{
		{"empty object", `{}`, "/text"},
		{"absent params", ``, "/text"},
		{"only the optional member", `{"unique":true}`, "/text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h.ServeCall(context.Background(), &worker.Request{Method: "text.count", Params: json.RawMessage(tc.params)})
			var rpcErr *schema.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != schema.CodeInvalidParams || fieldOf(t, rpcErr) != tc.wantField {
				t.Fatalf("text.count(%s) = %v, %v, want -32602 naming %s", tc.params, res, err, tc.wantField)
			}
		})
	}
	res, err := h.ServeCall(context.Background(), &worker.Request{Method: "text.count", Params: json.RawMessage(`{"text":"one two"}`)})
	if err != nil || res != (CountResult{Words: 2}) {
		t.Errorf(`text.count({"text":"one two"}) = %v, %v, want 2 words without unique`, res, err)
	}
}

// fieldOf returns data.field of an error.
func fieldOf(t *testing.T, e *schema.Error) string {
	t.Helper()
	var data struct {
		Field string `json:"field"`
	}
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatalf("error data %s: %v", e.Data, err)
	}
	return data.Field
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"none", nil, false},
		{"token", []string{"--nats-token", "t"}, false},
		{"token file", []string{"--token-file", secret}, false},
		{"user", []string{"--nats-user", "worker", "--nats-password-file", secret}, false},
		{"token twice", []string{"--nats-token", "t", "--token-file", secret}, true},
		{"user without password", []string{"--nats-user", "worker"}, true},
		{"user and token", []string{"--nats-user", "worker", "--nats-password-file", secret, "--nats-token", "t"}, true},
		{"missing file", []string{"--token-file", filepath.Join(dir, "nothing")}, true},
		{"empty file", []string{"--token-file", empty}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args)
			if err != nil {
				t.Fatalf("parse(%q) = %v", tc.args, err)
			}
			_, err = c.options()
			if (err != nil) != tc.wantErr {
				t.Errorf("options of %q = %v, want an error: %v", tc.args, err, tc.wantErr)
			}
		})
	}
}
