// Package a2a is the Agent2Agent (A2A) front door of the ingress: the
// JSON-RPC binding of A2A at POST /a2a and the agent card at
// /.well-known/agent-card.json, on the official Go SDK
// (github.com/a2aproject/a2a-go).
//
// An A2A task is a toolbus job seen through A2A. [Server] implements the
// SDK's request handler (a2asrv.RequestHandler) on the rpc.jobs.* methods,
// which it calls for the caller of each request through the ingress
// ([door.Ingress]), the seam it shares with the MCP front door:
// authentication, per-method authorization, quotas and rate limits are
// those of every transport, and since the job is the only state, a task
// is read, streamed and canceled from any ingress replica.
//
// How the parts meet:
//
//   - envelope.go checks each request before the SDK decodes it: the
//     JSON-RPC envelope with [schema.Parse], as POST /rpc checks it, then
//     the params of the method against A2A 0.3 (params.go), so that
//     -32700 means "not JSON", -32600 a request that is not one (answered
//     with its id whenever the id is valid), and -32602 params that do
//     not fit, naming the member in data.field; it answers batches and
//     notifications, and gives back the client's id byte for byte;
//   - message.go picks the tool of a message (a data part with method and
//     params, the skill in the message's metadata, or the operator's
//     method for plain text) and submits the job, with the message as
//     the first of the job's history and its referenceTaskIds as the
//     job's references; it refuses a message to an existing task (a
//     toolbus task runs one tool call), but for the answer to the
//     question of an input-required task;
//   - answer.go reads that answer (a data part, text for a question
//     whose schema has one string member, or the metadata
//     {"decline": true}) and gives it to rpc.jobs.answer; the question
//     itself is the status message of the task (task.go), where a
//     blocking send and a stream stop (follow.go);
//   - task.go turns job records into A2A tasks and events: queued →
//     submitted, running → working, succeeded → completed with the result
//     as an artifact's data part, failed → failed with the error, canceled
//     → canceled; progress becomes status-update events; the job's
//     history becomes the task's, cut to historyLength, each message with
//     a messageId that is the same on every read;
//   - follow.go follows a job's record until it is final, for a blocking
//     message/send, message/stream and tasks/resubscribe;
//   - push.go keeps push notification configs in a JetStream bucket and
//     POSTs the task to each on every state change, through the outbound
//     guard of internal/egress;
//   - card.go builds the public and the authenticated extended agent card
//     from the live registry of tools;
//   - errors.go maps toolbus's JSON-RPC errors to A2A's own codes.
package a2a
