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
	// MethodJobsAnswer answers the question a job's tool asked (rule 11
	// of PROTOCOL.md): params {"id", "answer"} or {"id", "decline": true}.
	MethodJobsAnswer = "rpc.jobs.answer"
	// MethodJobsPrefix starts every method of jobs.
	MethodJobsPrefix = "rpc.jobs."
)

// JobState is where a job is in its life. A job starts [JobQueued],
// becomes [JobRunning] when a worker takes it, and ends in one of the
// final states [JobSucceeded], [JobFailed] or [JobCanceled], which never
// change again. A running job whose worker was interrupted goes back to
// running on another worker (when its tool is safe to retry) or fails. A
// running job whose tool asks its caller a question is
// [JobInputRequired] until the caller answers it, then running again.
type JobState string

// The states of a job.
const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCanceled  JobState = "canceled"
	// JobInputRequired: the job's tool asked its caller a question
	// ([JobRecord] Question) and waits for the answer (rpc.jobs.answer).
	// The job still holds its worker; it is neither queued nor final.
	JobInputRequired JobState = "input_required"
)

// Final reports whether s is a state a job never leaves.
func (s JobState) Final() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCanceled
}

// Valid reports whether s is one of the states of a job.
func (s JobState) Valid() bool {
	return s == JobQueued || s == JobRunning || s == JobInputRequired || s.Final()
}

// Started reports whether s is a state of a job that holds a worker:
// [JobRunning] or [JobInputRequired].
func (s JobState) Started() bool {
	return s == JobRunning || s == JobInputRequired
}

// JobQuestion is the question a job's tool asked its caller, on the
// record of a job that is [JobInputRequired].
type JobQuestion struct {
	// ID names the question; an answer is for this question only.
	ID string `json:"id"`
	// Message is what the caller is asked, for a person.
	Message string `json:"message"`
	// Schema is the flat JSON Schema the answer must fit (rule 11).
	Schema json.RawMessage `json:"schema"`
	// AskedAt is when the runner recorded the question.
	AskedAt time.Time `json:"asked_at"`
}

// JobAnswerParams are the params of rpc.jobs.answer: the job's id, and
// either Answer, a JSON object that fits the question's schema, or
// Decline.
type JobAnswerParams struct {
	ID      string          `json:"id"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	Decline bool            `json:"decline,omitempty"`
	// Message, when set, is the caller's message that carried the answer,
	// which the job's history keeps after the question, as a user
	// message: {"id", "text"?, "data"?, "content"?}, the shape of
	// rpc.jobs.submit's message (the A2A front door passes the follow-up
	// message here, so that a task's history holds the question and then
	// the answer). Its id names it on every read.
	Message json.RawMessage `json:"message,omitempty"`
	// Question, when set, is the id of the question the answer is for:
	// the answer is refused (-32602 naming /question) when the job waits
	// on another, so that a late or repeated answer never answers a later
	// question of the same job.
	Question string `json:"question,omitempty"`
}

// WaitingOverloaded is the [JobRecord] Waiting value of a job whose
// ingress had no room for its call; the other values are the data.reason
// of what held the job up ([ReasonNoWorkers], [ReasonWorkersBusy],
// [ReasonBusDisconnected], [ReasonCircuitOpen]).
const WaitingOverloaded = "overloaded"

// JobProgress is what a running job last reported, and the body of a
// [ProgressReport] message.
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
	ID     string          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
	State  JobState        `json:"state"`
	// Waiting says why a queued job has not started: no worker serves its
	// method now ("no_workers"), every worker was busy ("workers_busy"),
	// the bus was unreachable ("bus_disconnected"), the ingress was
	// overloaded ("overloaded") or the method's circuit open
	// ("circuit_open"). Empty while nothing holds the job up; cleared when
	// it runs. The job stays queued and is offered to a worker again.
	Waiting  string          `json:"waiting,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    *Error          `json:"error,omitempty"`
	Progress *JobProgress    `json:"progress,omitempty"`
	// Question is the question the job's tool waits for the answer to,
	// while the job is [JobInputRequired]; nil otherwise.
	Question       *JobQuestion `json:"question,omitempty"`
	Attempts       int          `json:"attempts"`
	MaxAttempts    int          `json:"max_attempts"`
	Caller         string       `json:"caller,omitempty"`
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
	NotifyURL      string       `json:"notify_url,omitempty"`
	Callback       *JobCallback `json:"callback,omitempty"`
	// ContextID groups the job with others of one conversation, as the
	// submitter named it (the A2A front door keeps an A2A contextId here);
	// toolbus only stores it.
	ContextID string `json:"context_id,omitempty"`
	// References names the jobs this one follows up, as the submitter
	// named them (the A2A front door keeps a message's referenceTaskIds
	// here); toolbus only stores them.
	References []string `json:"references,omitempty"`
	// History holds the messages of the job's conversation, oldest
	// first: the submitter's message, when the submit carried one, and
	// what the job said on its way (each new text of its progress, and
	// its failure), within a byte budget (jobs.MaxHistoryBytes). The
	// oldest messages go first when the budget is reached;
	// HistoryDropped counts them.
	History        []JobMessage `json:"history,omitempty"`
	HistoryDropped int          `json:"history_dropped,omitempty"`
	CreatedAt      time.Time    `json:"created_at"`
	StartedAt      *time.Time   `json:"started_at,omitempty"`
	FinishedAt     *time.Time   `json:"finished_at,omitempty"`
	// TTLSeconds is how long the record is kept once the job has finished.
	TTLSeconds int64 `json:"ttl_seconds"`
}

// JobRole says who wrote a [JobMessage].
type JobRole string

// The roles of the messages of a job.
const (
	// JobRoleUser: the submitter's message.
	JobRoleUser JobRole = "user"
	// JobRoleAgent: what the job said (a new text of its progress, its
	// failure).
	JobRoleAgent JobRole = "agent"
)

// JobMessage is one message of a job's history. Its ID names it the same
// on every read: the submitter's own id for its message, and for a
// message of the job, the job's id and the message's place in the
// history ("<job id>-3"), which stays its place when older messages are
// dropped.
type JobMessage struct {
	ID   string  `json:"id"`
	Role JobRole `json:"role"`
	// Text is what the message says in words; empty when it says
	// nothing in words.
	Text string `json:"text,omitempty"`
	// Data is what the message says as a JSON object: {"percent": …} for
	// progress, {"error": {code, message, data}} for a failure.
	Data json.RawMessage `json:"data,omitempty"`
	// Content is the message as the protocol that carried it wrote it
	// (an A2A message), kept byte for byte; absent in the job's own
	// messages.
	Content json.RawMessage `json:"content,omitempty"`
	At      time.Time       `json:"at"`
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
