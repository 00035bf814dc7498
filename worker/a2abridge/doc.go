// Package a2abridge puts a remote Agent2Agent (A2A) agent behind toolbus:
// a [Bridge] reads the agent's card (at /.well-known/agent-card.json under
// its URL; the authenticated extended card when the bridge has
// credentials, see [WithBearerToken] and [WithAPIKey], and the agent
// offers one) and registers each of the card's skills on a
// [worker.Runtime] as a toolbus method named after the skill's id, under
// an optional prefix and fitted to the method grammar. Every such method
// takes the params described by [ParamsSchema]: an object with "text" (a
// string), "data" (an object) or both, announced through discovery with
// the skill's description and the card's version.
//
// A call sends the agent one message over A2A's JSON-RPC binding: a text
// part and a data part from the params, and the skill's id in the
// message's metadata under [SkillMetadataKey]. [Follow] then follows the
// task the message starts to its end: it reads the task's events from
// message/stream when the card says the agent can stream, and otherwise
// sends message/send without blocking and reads the task with tasks/get
// every poll interval. Each status change is reported as the call's
// progress ([worker.Progress]: the state and the status's text, when the
// call runs as a job). When the call is canceled or its deadline passes,
// the remote task is canceled (tasks/cancel).
//
// A completed task answers the JSON value [Result] makes of its artifacts:
// the data of a single data part, the text of text parts, else the parts.
// A task that failed, was rejected, was canceled by the agent or stopped
// for input is answered as a tool error (-32000) carrying the agent's
// message and the task's id and state. An agent that cannot be reached (no
// connection, an HTTP 5xx) is answered -32003 (unavailable, retryable):
// the bridge then reads the card again with bounded exponential backoff,
// and answers -32003 at once until it succeeds. The card is also read
// again every card refresh interval, so that skills the agent adds are
// served and skills it drops are answered -32601 (tool_withdrawn).
//
// The supervising, the backoff and the keeping of the methods in step
// are the kernel's, [github.com/toolbus/toolbus/worker/bridge]; this
// package is its adapter to A2A, which reads the card and calls.
package a2abridge
