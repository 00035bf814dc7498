package schema

import (
	"encoding/json"
	"time"
)

// The JSON-RPC methods of jobs, which every ingress answers when jobs are
// on. A client subscribes with MethodJobsSubscribe (WebSocket only) and is
// sent a MethodJobsProgress notification, carrying the record, each time
// the job's record changes, the last one when it ends.
const (
	MethodJobsSubmit    = "rpc.jobs.submit"
	MethodJobsGet       = "rpc.jobs.get"
	MethodJobsCancel    = "rpc.jobs.cancel"
	MethodJobsList      = "rpc.jobs.list"
	MethodJobsSubscribe = "rpc.jobs.subscribe"
	MethodJobsProgress  = "rpc.jobs.progress"
	// MethodJobsPrefix starts every method of jobs.
	MethodJobsPrefix = "rpc.jobs."
)

// JobState is where a job is in its life. A job starts [JobQueued],
// becomes [JobRunning] when a worker takes it, and ends in one of the
// final states [JobSucceeded], [JobFailed] or [JobCanceled], which never
// change again. A running job whose worker was interrupted goes back to
// running on another worker (when its tool is safe to retry) or fails.
type JobState string

// The states of a job.
const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCanceled  JobState = "canceled"
)

// Final reports whether s is a state a job never leaves.
func (s JobState) Final() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCanceled
}

// Valid reports whether s is one of the states of a job.
func (s JobState) Valid() bool {
	return s == JobQueued || s == JobRunning || s.Final()
}

// JobProgress is what a running job last reported.
type JobProgress struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message,omitempty"`
}

// JobCallbackState is how far the completion callback of a job has got.
type JobCallbackState string

// The states of a completion callback.
const (
	// JobCallbackPending: the job has a notify_url and the callback has
	// not been delivered yet (it may be between attempts).
	JobCallbackPending JobCallbackState = "pending"
	// JobCallbackDelivered: the notify_url answered 2xx.
	JobCallbackDelivered JobCallbackState = "delivered"
	// JobCallbackFailed: every attempt failed; the result is still in the
	// record.
	JobCallbackFailed JobCallbackState = "failed"
)

// JobCallback records the delivery of a job's completion callback.
type JobCallback struct {
	State    JobCallbackState `json:"state"`
	Attempts int              `json:"attempts"`
	// Failures holds one entry per failed attempt, oldest first.
	Failures    []JobCallbackFailure `json:"failures,omitempty"`
	DeliveredAt *time.Time           `json:"delivered_at,omitempty"`
}

// JobCallbackFailure is one failed delivery attempt of a callback.
type JobCallbackFailure struct {
	At time.Time `json:"at"`
	// Error is the class of the failure, never text of the receiver's:
	// "blocked" (the address is one callbacks may not reach), "dns",
	// "refused", "unreachable", "timeout", "tls", "closed" (closed
	// without an answer), "protocol" (the answer was not HTTP),
	// "canceled", "failed" (anything else), or "status N" for an answer
	// outside 2xx.
	Error string `json:"error"`
}

// JobRecord is a job as rpc.jobs.get returns it and as the callback posts
// it. Exactly one of Result and Error is set once the job has succeeded or
// failed; a canceled job carries a -32004 Error.
type JobRecord struct {
	ID             string          `json:"id"`
	Method         string          `json:"method"`
	Params         json.RawMessage `json:"params,omitempty"`
	State          JobState        `json:"state"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *Error          `json:"error,omitempty"`
	Progress       *JobProgress    `json:"progress,omitempty"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	Caller         string          `json:"caller,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	NotifyURL      string          `json:"notify_url,omitempty"`
	Callback       *JobCallback    `json:"callback,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// TTLSeconds is how long the record is kept once the job has finished.
	TTLSeconds int64 `json:"ttl_seconds"`
	// Waiting says why a queued job has not started yet: a reason such as
	// [ReasonNoWorkers], no worker serves its method now. It is empty
	// once the job leaves the queue.
	Waiting string `json:"waiting,omitempty"`
}

// JobSubmitResult is the result of rpc.jobs.submit.
type JobSubmitResult struct {
	ID    string   `json:"id"`
	State JobState `json:"state"`
}

// JobList is the result of rpc.jobs.list: a page of records without their
// params and results, and the cursor of the next page, if there is one.
type JobList struct {
	Jobs       []*JobRecord `json:"jobs"`
	NextCursor string       `json:"next_cursor,omitempty"`
}
