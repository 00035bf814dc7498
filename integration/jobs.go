//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Job is the part of a job record the scenarios check.
type Job struct {
	ID       string `json:"id"`
	Method   string `json:"method"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// StartedAt is when its latest attempt started, nil while queued.
	StartedAt *time.Time `json:"started_at"`
	// FinishedAt is when it ended, nil until then.
	FinishedAt *time.Time      `json:"finished_at"`
	Result     json.RawMessage `json:"result"`
	// Progress is the latest progress report of a running job, null
	// until its worker sends one.
	Progress json.RawMessage `json:"progress"`
	Error    *struct {
		Code int `json:"code"`
		Data struct {
			Reason string `json:"reason"`
		} `json:"data"`
	} `json:"error"`
}

// Final reports whether the job has ended.
func (j *Job) Final() bool {
	return j.State == "succeeded" || j.State == "failed" || j.State == "canceled"
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d %s", e.Code, e.Message) }

// rpc sends one JSON-RPC call to the ingress at base and decodes its
// result into out.
func rpc(ctx context.Context, base, method string, params, out any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": json.RawMessage(p)})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rpc", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	var answer struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("%s %s: %w: %.200s", method, resp.Status, err, raw)
	}
	if answer.Error != nil {
		return answer.Error
	}
	return json.Unmarshal(answer.Result, out)
}

// SubmitJob submits a job through the ingress at base and returns its id.
func SubmitJob(ctx context.Context, base, method string, params any) (string, error) {
	var rec Job
	if err := rpc(ctx, base, "rpc.jobs.submit", map[string]any{"method": method, "params": params}, &rec); err != nil {
		return "", err
	}
	if rec.ID == "" {
		return "", fmt.Errorf("rpc.jobs.submit answered no id")
	}
	return rec.ID, nil
}

// GetJob reads a job's record through the ingress at base.
func GetJob(ctx context.Context, base, id string) (*Job, error) {
	var rec Job
	if err := rpc(ctx, base, "rpc.jobs.get", map[string]string{"id": id}, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// WaitJobs polls every job, through the ingress replicas in turn, until
// each has ended or timeout has passed, and returns the last record read
// of each (nil if none could be read).
func (c *Cluster) WaitJobs(ids []string, timeout time.Duration) map[string]*Job {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs := make(map[string]*Job, len(ids))
	for n := 0; ctx.Err() == nil; n++ {
		pending := 0
		for _, id := range ids {
			if r := recs[id]; r != nil && r.Final() {
				continue
			}
			urls := c.URLs()
			if len(urls) == 0 {
				pending++
				continue
			}
			if r, err := GetJob(ctx, urls[n%len(urls)], id); err == nil {
				recs[id] = r
				if r.Final() {
					continue
				}
			}
			pending++
		}
		if pending == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return recs
}

// JobTally counts the fate of jobs.
type JobTally struct {
	Submitted   int
	Succeeded   int
	Failed      map[string]int // by data.reason
	Lost        int            // not ended in time, or no record
	Duplicated  int            // run to completion more than once
	BadAttempts int            // attempts not 1 where the job ran once
}

func (t JobTally) String() string {
	return fmt.Sprintf("jobs submitted=%d succeeded=%d failed=%v lost=%d duplicated=%d bad-attempts=%d",
		t.Submitted, t.Succeeded, t.Failed, t.Lost, t.Duplicated, t.BadAttempts)
}

// CountJobs tallies jobs from their last records and from what the
// workers' logs say they ran: a job run to its end (its handler returned)
// by more than one worker, or twice by one, is duplicated.
func CountJobs(ids []string, recs map[string]*Job, runs []Served) JobTally {
	t := JobTally{Submitted: len(ids), Failed: make(map[string]int)}
	for _, id := range ids {
		finished := 0
		for _, s := range runs {
			finished += len(s[id])
		}
		if finished > 1 {
			t.Duplicated++
		}
		r := recs[id]
		switch {
		case r == nil || !r.Final():
			t.Lost++
		case r.State == "succeeded":
			t.Succeeded++
			if r.Attempts != 1 || finished != 1 {
				t.BadAttempts++
			}
		default:
			reason := r.State
			if r.Error != nil && r.Error.Data.Reason != "" {
				reason = r.Error.Data.Reason
			}
			t.Failed[reason]++
			if r.Attempts != 1 {
				t.BadAttempts++
			}
		}
	}
	return t
}
