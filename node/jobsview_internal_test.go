package node

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

func TestJobsView(t *testing.T) {
	now := time.Now()
	st := jobs.Stats{
		ByState:   map[schema.JobState]int{schema.JobRunning: 1, schema.JobSucceeded: 2},
		Truncated: true,
		Recent: []schema.JobRecord{
			{ID: "b", Method: "sleep", State: schema.JobRunning, Progress: &schema.JobProgress{Percent: 40, Message: "step 2"}, CreatedAt: now},
			{ID: "a", Method: "echo", State: schema.JobSucceeded, CreatedAt: now.Add(-time.Second)},
			{ID: "q", Method: "echo", State: schema.JobQueued},
		},
	}
	got := jobsView(st)
	if got.ByState["running"] != 1 || got.ByState["succeeded"] != 2 || !got.Truncated {
		t.Errorf("counts %+v", got)
	}
	if len(got.Recent) != 3 || got.Recent[0].ID != "b" || *got.Recent[0].Percent != 40 || got.Recent[0].Message != "step 2" {
		t.Errorf("running job %+v", got.Recent[0])
	}
	if got.Recent[1].Percent == nil || *got.Recent[1].Percent != 100 {
		t.Errorf("a succeeded job shows as complete: %+v", got.Recent[1])
	}
	if got.Recent[2].Percent != nil {
		t.Errorf("a queued job has no progress: %+v", got.Recent[2])
	}
}
