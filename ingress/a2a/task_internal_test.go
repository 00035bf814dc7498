package a2a

import (
	"testing"

	a2a "github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// TestState: every job state has the A2A task state that says the same,
// a job waiting for its caller's answer input-required among them.
func TestState(t *testing.T) {
	for _, tc := range []struct {
		job  schema.JobState
		want a2a.TaskState
	}{
		{schema.JobQueued, a2a.TaskStateSubmitted},
		{schema.JobRunning, a2a.TaskStateWorking},
		{schema.JobInputRequired, a2a.TaskStateInputRequired},
		{schema.JobSucceeded, a2a.TaskStateCompleted},
		{schema.JobFailed, a2a.TaskStateFailed},
		{schema.JobCanceled, a2a.TaskStateCanceled},
		{"nonsense", a2a.TaskStateUnknown},
	} {
		if got := state(tc.job); got != tc.want {
			t.Errorf("state(%q) = %q, want %q", tc.job, got, tc.want)
		}
	}
}
