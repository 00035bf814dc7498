package bench

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// fakeJobs answers rpc.jobs.submit and rpc.jobs.get the way the toolbus
// ingress does, for jobs that run at once, and can be told to go wrong.
type fakeJobs struct {
	// end is the state every job ends in: succeeded unless set.
	end schema.JobState
	// submitErr makes every submit fail with it.
	submitErr *schema.Error
	// runningGets is how many polls see a job still running.
	runningGets int

	mu   sync.Mutex
	n    int
	gets map[string]int
}

func (f *fakeJobs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	items, _, perr := schema.Parse(body, schema.Limits{})
	if perr != nil || len(items) != 1 || items[0].Err != nil {
		writeJSON(w, schema.Response{Error: schema.ErrInvalidRequest})
		return
	}
	req := items[0].Request
	result, rpcErr := f.serve(req)
	if rpcErr != nil {
		writeJSON(w, schema.Response{ID: req.ID, Error: rpcErr})
		return
	}
	b, _ := json.Marshal(result)
	writeJSON(w, schema.Response{ID: req.ID, Result: b})
}

func (f *fakeJobs) serve(req schema.Request) (any, *schema.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req.Method {
	case schema.MethodJobsSubmit:
		var p struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(req.Params, &p) != nil || p.Method == "" {
			return nil, schema.ErrInvalidParams
		}
		if f.submitErr != nil {
			return nil, f.submitErr
		}
		f.n++
		return schema.JobSubmitResult{ID: "job-" + strconv.Itoa(f.n), State: schema.JobQueued}, nil
	case schema.MethodJobsGet:
		var p struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(req.Params, &p) != nil {
			return nil, schema.ErrInvalidParams
		}
		n, err := strconv.Atoi(strings.TrimPrefix(p.ID, "job-"))
		if err != nil || n < 1 || n > f.n {
			return nil, schema.ErrJobNotFound
		}
		if f.gets == nil {
			f.gets = make(map[string]int)
		}
		f.gets[p.ID]++
		rec := schema.JobRecord{ID: p.ID, Method: "echo", State: schema.JobSucceeded, Result: json.RawMessage(`{}`)}
		switch {
		case f.gets[p.ID] <= f.runningGets:
			rec.State, rec.Result = schema.JobRunning, nil
		case f.end != "" && f.end != schema.JobSucceeded:
			rec.State, rec.Result = f.end, nil
			rec.Error = schema.NewError(schema.CodeToolError, "it broke", nil)
		}
		return rec, nil
	}
	return nil, schema.ErrMethodNotFound
}

func TestJobs(t *testing.T) {
	tests := []struct {
		name       string
		fake       *fakeJobs
		wantErr    error // nil when the scenario should succeed
		wantSubmit bool  // whether submits were measured
	}{
		{name: "jobs succeed", fake: &fakeJobs{runningGets: 2}, wantSubmit: true},
		{name: "jobs fail", fake: &fakeJobs{end: schema.JobFailed}, wantErr: ErrWrongAnswer},
		{name: "submits are refused", fake: &fakeJobs{submitErr: schema.ErrOverloaded}, wantErr: schema.ErrOverloaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Jobs(t.Context(), JobsConfig{
				URL:         serve(t, tt.fake) + "/rpc",
				Concurrency: 4,
				Duration:    50 * time.Millisecond,
				Warmup:      -1,
				Drain:       5 * time.Second,
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Jobs() error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if res.Method != "echo" {
				t.Errorf("Method = %q, want echo", res.Method)
			}
			if res.Poll.Requests == 0 || res.Poll.Errors != 0 || res.Poll.Concurrency != 1 {
				t.Errorf("Poll Requests, Errors, Concurrency = %d, %d, %d, want some, 0, 1", res.Poll.Requests, res.Poll.Errors, res.Poll.Concurrency)
			}
			if res.Submit.Requests == 0 || res.Submit.Errors != 0 || res.Submit.Concurrency != 4 {
				t.Errorf("Submit Requests, Errors, Concurrency = %d, %d, %d, want some, 0, 4", res.Submit.Requests, res.Submit.Errors, res.Submit.Concurrency)
			}
			tt.fake.mu.Lock()
			submitted := tt.fake.n
			tt.fake.mu.Unlock()
			// One job is submitted to be polled, the rest by the loop.
			if got, want := res.Jobs, int64(submitted-1); got != want {
				t.Errorf("Jobs = %d, want the %d submitted by the loop", got, want)
			}
			if res.Drained <= 0 || res.RunRate <= 0 {
				t.Errorf("Drained, RunRate = %v, %v, want both positive", res.Drained, res.RunRate)
			}
		})
	}
}

func TestJobsConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  JobsConfig
	}{
		{name: "no URL", cfg: JobsConfig{}},
		{name: "WebSocket URL", cfg: JobsConfig{URL: "ws://127.0.0.1:1/rpc"}},
		{name: "negative concurrency", cfg: JobsConfig{URL: "http://127.0.0.1:1/rpc", Concurrency: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Jobs(t.Context(), tt.cfg); err == nil {
				t.Errorf("Jobs(%+v) error = nil, want one", tt.cfg)
			}
		})
	}
}
