package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/toolbus/toolbus/internal/proc"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// confirmQuestion is the question the demo's confirm asks for the action
// deploy.
const confirmQuestion = "proceed with deploy?"

// waitJob reads job id with jobs get until ok holds for its record, and
// returns that record. It fails the test when the job ends without ok.
func waitJob(t *testing.T, url, id, what string, ok func(schema.JobRecord) bool) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool {
		rec = jobRecord(t, url, id)
		if !ok(rec) && rec.State.Final() {
			t.Fatalf("job %s ended %s %s %v, want it to reach: %s", id, rec.State, rec.Result, rec.Error, what)
		}
		return ok(rec)
	}, "job "+id+" "+what)
	return rec
}

// askedConfirm submits a job of the demo's confirm for the action deploy
// and waits until it is input_required with confirm's question.
func askedConfirm(t *testing.T, url string) string {
	t.Helper()
	id := submitConfirm(t, url)
	rec := waitJob(t, url, id, "asks its question", func(r schema.JobRecord) bool { return r.State == schema.JobInputRequired })
	if q := rec.Question; q == nil || q.Message != confirmQuestion || !strings.Contains(string(q.Schema), `"confirmed"`) {
		t.Fatalf("job %s question = %+v, want confirm's %q with a schema of confirmed", id, q, confirmQuestion)
	}
	return id
}

// submitConfirm submits a job of the demo's confirm for the action deploy,
// canceled when the test ends if it has not ended by then, so that the
// cluster stops without waiting for its answer.
func submitConfirm(t *testing.T, url string) string {
	t.Helper()
	id := submitJob(t, url, "confirm", `{"action":"deploy"}`)
	t.Cleanup(func() {
		if !jobRecord(t, url, id).State.Final() {
			execute(t, context.Background(), "jobs", "cancel", "--url", url, id)
		}
	})
	return id
}

// ended waits until job id is final and returns its record.
func ended(t *testing.T, url, id string) schema.JobRecord {
	t.Helper()
	return waitJob(t, url, id, "ends", func(r schema.JobRecord) bool { return r.State.Final() })
}

// TestJobsAnswer answers confirm jobs with `jobs answer`: an answer that
// fits the schema and a decline resume the job, which succeeds with what
// confirm makes of them; an answer that does not fit is refused naming the
// member and leaves the job waiting; a job that waits for no answer is
// refused naming the id.
func TestJobsAnswer(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	// answeredAlready is a confirm job that asked, was answered, and ended.
	answeredAlready := func(t *testing.T) string {
		t.Helper()
		id := askedConfirm(t, c.URL)
		if out, err := execute(t, context.Background(), "jobs", "answer", "--url", c.URL, id, `{"confirmed":true}`); err != nil {
			t.Fatalf("jobs answer %s = %v; output:\n%s", id, err, out)
		}
		if rec := ended(t, c.URL, id); rec.State != schema.JobSucceeded {
			t.Fatalf("job %s answered = %s %v, want succeeded", id, rec.State, rec.Error)
		}
		return id
	}
	tests := []struct {
		name string
		job  func(t *testing.T) string // makes the job to answer and returns its id
		args []string                  // after `jobs answer --url URL ID`
		// wantErr is the error of the command, nil for success; then
		// wantField is the member its data.field names, and wantState the
		// state the job stays in.
		wantErr   error
		wantField string
		wantState schema.JobState
		// wantResult is the result of the job resumed.
		wantResult string
	}{
		{name: "confirmed", job: func(t *testing.T) string { return askedConfirm(t, c.URL) },
			args: []string{`{"confirmed":true}`}, wantResult: `{"action":"deploy","confirmed":true}`},
		{name: "not confirmed", job: func(t *testing.T) string { return askedConfirm(t, c.URL) },
			args: []string{`{"confirmed":false}`}, wantResult: `{"action":"deploy","confirmed":false}`},
		{name: "declined", job: func(t *testing.T) string { return askedConfirm(t, c.URL) },
			args: []string{"--decline"}, wantResult: `{"action":"deploy","confirmed":false,"declined":true}`},
		{name: "an answer that does not fit the schema", job: func(t *testing.T) string { return askedConfirm(t, c.URL) },
			args:    []string{`{"confirmed":"yes"}`},
			wantErr: schema.ErrInvalidParams, wantField: "/answer/confirmed", wantState: schema.JobInputRequired},
		{name: "an answer without the required member", job: func(t *testing.T) string { return askedConfirm(t, c.URL) },
			args:    []string{`{}`},
			wantErr: schema.ErrInvalidParams, wantField: "/answer/confirmed", wantState: schema.JobInputRequired},
		{name: "a job answered already", job: answeredAlready,
			args:    []string{`{"confirmed":true}`},
			wantErr: schema.ErrInvalidParams, wantField: "/id", wantState: schema.JobSucceeded},
		{name: "a job that never asked", job: func(t *testing.T) string {
			id := submitJob(t, c.URL, "echo", `{"asks":false}`)
			ended(t, c.URL, id)
			return id
		}, args: []string{"--decline"}, wantErr: schema.ErrInvalidParams, wantField: "/id", wantState: schema.JobSucceeded},
		{name: "an unknown job", job: func(*testing.T) string { return "00000000000000000000000000" },
			args: []string{`{"confirmed":true}`}, wantErr: schema.ErrJobNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.job(t)
			args := append([]string{"jobs", "answer", "--url", c.URL, id}, tt.args...)
			out, err := execute(t, context.Background(), args...)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("%q = %v, want %v; output:\n%s", args, err, tt.wantErr, out)
			}
			if tt.wantErr != nil {
				var rpcErr *schema.Error
				var data struct {
					Field string `json:"field"`
				}
				if !errors.As(err, &rpcErr) || (rpcErr.Data != nil && json.Unmarshal(rpcErr.Data, &data) != nil) || data.Field != tt.wantField {
					t.Errorf("%q = %v with data %s, want data.field %q", args, err, dataOf(rpcErr), tt.wantField)
				}
				// What a person reads names the member too.
				if member := strings.TrimPrefix(tt.wantField, "/answer/"); member != tt.wantField && !strings.Contains(err.Error(), member) {
					t.Errorf("%q = %q, want the message to name %q", args, err, member)
				}
				if tt.wantState != "" {
					rec := jobRecord(t, c.URL, id)
					if rec.State != tt.wantState {
						t.Errorf("job after %q = %s, want %s", args, rec.State, tt.wantState)
					}
					if waiting := tt.wantState == schema.JobInputRequired; (rec.Question != nil) != waiting {
						t.Errorf("job after %q has question %+v, want one: %v", args, rec.Question, waiting)
					}
				}
				return
			}
			var taken schema.JobRecord
			if err := json.Unmarshal([]byte(out), &taken); err != nil {
				t.Fatalf("%q printed %q: %v", args, out, err)
			}
			// The record printed is the job's once the answer was taken:
			// resumed, or already done.
			if taken.ID != id || taken.Question != nil || (taken.State != schema.JobRunning && taken.State != schema.JobSucceeded) {
				t.Errorf("%q printed %s %s question %+v, want job %s running again without the question", args, taken.ID, taken.State, taken.Question, id)
			}
			rec := ended(t, c.URL, id)
			if rec.State != schema.JobSucceeded || compact(rec.Result) != tt.wantResult || rec.Question != nil {
				t.Errorf("job after %q = %s %s %v question %+v, want succeeded %s", args, rec.State, rec.Result, rec.Error, rec.Question, tt.wantResult)
			}
		})
	}
}

// dataOf returns the data of e for a failure message.
func dataOf(e *schema.Error) string {
	if e == nil {
		return "(no JSON-RPC error)"
	}
	return string(e.Data)
}

// TestJobsWatchShowsTheQuestion follows a confirm job with `jobs watch`:
// while the job is input_required it prints the question, its schema and
// the command that answers it, once; answered from another command, the
// job succeeds and watch prints its result and ends.
func TestJobsWatchShowsTheQuestion(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs())
	id := submitConfirm(t, c.URL)

	var out syncBuffer
	watch := start(t, &out, "jobs", "watch", "--url", c.URL, "--interval", "10ms", id)
	watched := make(chan error, 1)
	done := make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		watched <- watch.ExecuteContext(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	fail := func() error { return <-watched }
	out.waitFor(t, regexp.MustCompile(`(?m)^(input_required) `), done, fail)
	out.waitFor(t, regexp.MustCompile(`(?m)^the job asks: (`+regexp.QuoteMeta(confirmQuestion)+`)$`), done, fail)
	out.waitFor(t, regexp.MustCompile(`(?m)^  answer schema: (.*"confirmed".*)$`), done, fail)
	out.waitFor(t, regexp.MustCompile(`(?m)^  answer with: (toolbus jobs answer `+id+` '<answer>')`), done, fail)

	if answerOut, err := execute(t, context.Background(), "jobs", "answer", "--url", c.URL, id, `{"confirmed":true}`); err != nil {
		t.Fatalf("jobs answer %s = %v; output:\n%s", id, err, answerOut)
	}
	<-done
	if err := <-watched; err != nil {
		t.Fatalf("jobs watch of an answered confirm = %v, want nil; output:\n%s", err, out.String())
	}
	got := out.String()
	for _, w := range res(`(?m)^succeeded +\[#{30}\] 100%$`, `(?m)^result:\n\{\n  "action": "deploy",\n  "confirmed": true\n\}$`) {
		if !w.MatchString(got) {
			t.Errorf("jobs watch printed:\n%s\nwant it to match %s", got, w)
		}
	}
	if n := strings.Count(got, "the job asks:"); n != 1 {
		t.Errorf("jobs watch printed the question %d times, want once; output:\n%s", n, got)
	}
	if asked, succeeded := strings.Index(got, "the job asks:"), strings.Index(got, "succeeded "); asked > succeeded {
		t.Errorf("jobs watch printed the question at %d, after the final state at %d; output:\n%s", asked, succeeded, got)
	}
}

// TestJobsWorkerKilledWhileAsking runs confirm on a `toolbus worker`
// process of its own, joined to a `toolbus dev` that serves no demo tools,
// and kills the worker with SIGKILL while the job waits for its answer:
// confirm is not safe to run twice, so the job fails as
// interrupted_not_retryable, and its question leaves the record.
func TestJobsWorkerKilledWhileAsking(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--tools", "conform", "--local-calls=false")
	url := dev.waitFor(t, readyLine)
	natsURL := dev.waitFor(t, natsLine)
	token := dev.waitFor(t, joinLine)

	w, err := proc.Start(t.Context(), proc.Spec{
		Name: "toolbus worker",
		Command: []string{os.Args[0], "worker", "--nats", natsURL, "--nats-token", token,
			"--tools", "demo", "--metrics-listen", "", "--log-level", "info"},
		Env:   []string{runMainEnv + "=1"},
		Ready: regexp.MustCompile(`worker ready`),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop() })
	toolbustest.Eventually(t, func() bool {
		_, err := execute(t, context.Background(), "tools", "show", "--url", url, "confirm")
		return err == nil
	}, "the worker process's confirm is known to the ingress")

	id := askedConfirm(t, url)
	if err := w.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %s: %v", w, err)
	}
	<-w.Done()
	rec := ended(t, url, id)
	if rec.State != schema.JobFailed || rec.Error.Reason() != schema.ReasonInterruptedNotRetryable || rec.Question != nil {
		t.Fatalf("job after its worker was killed = %s %v question %+v, want failed %s without a question",
			rec.State, rec.Error, rec.Question, schema.ReasonInterruptedNotRetryable)
	}
}
