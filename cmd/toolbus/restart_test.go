package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// jobRecord reads a job through the jobs get command.
func jobRecord(t *testing.T, url, id string) schema.JobRecord {
	t.Helper()
	out, err := execute(t, context.Background(), "jobs", "get", "--url", url, id)
	if err != nil {
		t.Fatalf("jobs get %s = %v\n%s", id, err, out)
	}
	var rec schema.JobRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("jobs get %s printed %q: %v", id, out, err)
	}
	return rec
}

// TestDevRestartKeepsJobs stops a whole toolbus dev while some jobs have
// finished and others still wait in the queue, starts it again on the same
// data directory, and checks that every record and result is still there
// and that the queued jobs run.
func TestDevRestartKeepsJobs(t *testing.T) {
	data := t.TempDir()
	args := []string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--data", data,
		"--job-concurrency", "1", "--job-lease", "2s", "--drain-timeout", "10s"}
	dev := runCommand(t, args...)
	url := dev.waitFor(t, readyLine)

	// One runner slot: the first job runs, the others queue behind it.
	const n = 4
	ids := make([]string, n)
	for i := range ids {
		ids[i] = submitJob(t, url, "sleep", fmt.Sprintf(`{"ms":%d}`, 300+i))
	}
	toolbustest.Eventually(t, func() bool { return jobRecord(t, url, ids[0]).State == schema.JobSucceeded }, "the first job succeeds")
	if last := jobRecord(t, url, ids[n-1]); last.State != schema.JobQueued {
		t.Fatalf("last job = %s before the restart, want queued", last.State)
	}
	if err := dev.stop(); err != nil {
		t.Fatalf("dev stopped with %v", err)
	}
	stopped := time.Now()

	dev = runCommand(t, args...)
	url = dev.waitFor(t, readyLine)
	first := jobRecord(t, url, ids[0])
	if first.State != schema.JobSucceeded || compact(first.Result) != `{"slept_ms":300}` {
		t.Fatalf("job finished before the restart = %s %s, want its result kept", first.State, first.Result)
	}
	for i, id := range ids {
		var rec schema.JobRecord
		toolbustest.Eventually(t, func() bool {
			rec = jobRecord(t, url, id)
			return rec.State.Final()
		}, fmt.Sprintf("job %d ends after the restart", i))
		if rec.State != schema.JobSucceeded {
			t.Fatalf("job %d after the restart = %s (%+v), want succeeded", i, rec.State, rec.Error)
		}
		if want := fmt.Sprintf(`{"slept_ms":%d}`, 300+i); compact(rec.Result) != want {
			t.Fatalf("job %d result = %s, want %s", i, rec.Result, want)
		}
		if i == n-1 && (rec.StartedAt == nil || rec.StartedAt.Before(stopped)) {
			t.Fatalf("the job queued at the stop started at %v, want after the restart at %v", rec.StartedAt, stopped)
		}
	}
	if err := dev.stop(); err != nil {
		t.Fatalf("dev stopped with %v", err)
	}
}
