package schema

import (
	"bytes"
	"encoding/json"
)

// The HTTP headers of toolbus's front doors and of its outbound job
// callbacks. The headers of the bus envelope are beside the envelope
// ([HeaderDeadline], [HeaderCallID], [HeaderHeartbeat], …).
const (
	// HeaderTimeout is the deadline a client asks for its calls, as a Go
	// duration ("1.5s", "250ms").
	HeaderTimeout = "Toolbus-Timeout"
	// HeaderIdempotencyKey names the calls of a request for the
	// idempotency records (see [SetIdempotencyKey]).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderTimestamp is the Unix time, in seconds, at which a job
	// callback was signed; the signature covers it.
	HeaderTimestamp = "Toolbus-Timestamp"
	// HeaderSignature is the HMAC-SHA256 signature of a job callback.
	HeaderSignature = "Toolbus-Signature"
	// HeaderJobID names the job a callback is about.
	HeaderJobID = "Toolbus-Job-Id"
)

// The values of an error's data.reason with which toolbus itself (not a
// tool) says why a call failed. Agents may branch on them; each is listed
// in schema/PROTOCOL.md. [Error.Reason] reads one back.
const (
	// -32601: the method name breaks the bus grammar, or is a reserved
	// rpc.* name the ingress does not serve, or no worker is subscribed,
	// or a job was submitted of a method no worker has advertised.
	ReasonInvalidMethodName = "invalid_method_name"
	ReasonReserved          = "reserved"
	ReasonNoResponders      = "no_responders"
	ReasonUnknownMethod     = "unknown_method"
	// -32003, retryable: a known method no worker serves now, every worker
	// busy, the bus unreachable, a circuit open, the jobs store not set up
	// yet, the ingress shutting down.
	ReasonNoWorkers       = "no_workers"
	ReasonWorkersBusy     = "workers_busy"
	ReasonBusDisconnected = "bus_disconnected"
	ReasonCircuitOpen     = "circuit_open"
	ReasonJobsNotReady    = "jobs_not_ready"
	ReasonShuttingDown    = "shutting_down"
	// -32003 or -32006: the idempotency store cannot record the call, or
	// the answer was too large to keep.
	ReasonIdempotencyStoreNotOpen     = "idempotency_store_not_open"
	ReasonIdempotencyStoreFull        = "idempotency_store_full"
	ReasonIdempotencyStoreUnavailable = "idempotency_store_unavailable"
	ReasonIdempotencyAnswerNotKept    = "idempotency_answer_not_kept"
	// -32006: a call with the key started but how it ended was never
	// recorded (the store was full, or the ingress running it stopped);
	// it may have run, so it is not run again while its record lives.
	ReasonIdempotencyOutcomeUnknown = "idempotency_outcome_unknown"
	// -32600: an idempotency key sent again with another method or params.
	ReasonIdempotencyKeyReused = "idempotency_key_reused"
	// -32603: the worker that ran the call stopped answering, or answered
	// what the aggregator cannot read, or nothing answered the call.
	ReasonWorkerLost = "worker_lost"
	ReasonBadReply   = "bad_reply"
	ReasonNoAnswer   = "no_answer"
	// -32001: the handler was still running at the call's deadline.
	ReasonDeadlineInWorker = "deadline_in_worker"
	// Jobs: a job ran past its longest run time, was interrupted and may
	// not run again, or used up its attempts; a method that only a
	// WebSocket can serve; a job already final; a cancel by its caller.
	ReasonMaxRunTime              = "max_run_time"
	ReasonInterruptedNotRetryable = "interrupted_not_retryable"
	ReasonAttemptsExhausted       = "attempts_exhausted"
	ReasonNeedsWebSocket          = "needs_websocket"
	ReasonJobFinished             = "job_finished"
	ReasonCanceledByCaller        = "canceled_by_caller"
	// Questions (rule 11): -32000, a tool asked a question in a call whose
	// caller cannot answer (a synchronous call); a job whose question was
	// not answered by its deadline.
	ReasonCannotAsk          = "cannot_ask"
	ReasonQuestionUnanswered = "question_unanswered"
	// -32003: a bridged tool its remote server no longer lists.
	ReasonToolWithdrawn = "tool_withdrawn"
	// -32005: no credentials, or a caller not allowed the method.
	ReasonUnauthenticated    = "unauthenticated"
	ReasonInvalidCredentials = "invalid_credentials"
	ReasonNotAllowed         = "not_allowed"
)

// Reason returns the error's data.reason, or "" when its data is not an
// object with a string reason. It is how a layer classifies an error.
func (e *Error) Reason() string {
	return e.dataString("reason")
}

// Limit returns the name of the limit a refusal names in data.limit, or
// "" when it names none.
func (e *Error) Limit() string {
	return e.dataString("limit")
}

// dataString returns the string member name of e's data object, or "".
func (e *Error) dataString(name string) string {
	if e == nil || len(e.Data) == 0 || !bytes.Contains(e.Data, []byte(`"`+name+`"`)) {
		return ""
	}
	var data map[string]json.RawMessage
	if json.Unmarshal(e.Data, &data) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(data[name], &s) != nil {
		return ""
	}
	return s
}
