// Package conform is the worker conformance kit: it checks that a worker,
// written in any language, speaks the bus protocol of schema/PROTOCOL.md.
// `toolbus conform` is its command line, which runs [RunRemote]: the
// check against a worker that joins a NATS server over the network, with
// the credentials the kit passes on to it; [Run] is the same check, on a
// connection of the caller's, for Go tests.
//
// The kit starts the worker's command, waits until it answers, then drives
// it through the rules of PROTOCOL.md one after the other as the
// aggregator's side of the bus would: it publishes call messages it builds
// itself with nats.go and the envelope codec of package schema, listens on
// their reply subjects, and judges every message that comes back. It does
// not use toolbus's aggregator, so what it checks is the wire, not the
// agreement of two parts of toolbus. Last it sends the worker SIGTERM while
// a call is running, checks that the worker drains and leaves, and stops
// it. It writes one line per rule, PASS, FAIL (with what it sent, what it
// expected and what came back) or SKIP (with the reason: an optional part
// of the protocol the worker does not speak), and a summary.
//
// Why a package of its own: the kit is a client of the wire protocol with
// no place in the call path. It cannot live in the aggregator, which it
// must not trust, nor in cmd/toolbus, because Go code outside the binary
// (an SDK's own tests, toolbus's tests of a foreign worker) runs it
// through [Run], as httptest serves tests; and it is not internal for the
// same reason.
//
// # The conformance toolset
//
// The worker under test serves these methods (the Go runtime's are in
// package worker/conformtools; `toolbus worker --tools conform` serves
// them):
//
//	conform.echo      answers {"id": ID, "method": M, "params": P, "caller": C}: the id
//	                  and params of the call envelope as JSON values (null when absent),
//	                  its method, and its caller (absent or null when none)
//	conform.sleep     {"ms": N}: waits N milliseconds, then answers {"slept_ms": N};
//	                  it stops waiting when the call's deadline passes or a cancel
//	                  message names the call, and then answers an error or nothing
//	conform.serial    the same as conform.sleep, but the worker runs at most one
//	                  call of it at a time; a worker without a concurrency limit
//	                  leaves it out, and the busy and orphan rules are skipped
//	conform.fail      answers the error code 2001, any message, data {"conform": "fail"}
//	conform.panic     crashes its handler (an uncaught exception, a panic)
//	conform.progress  reports progress once (percent 50, message "halfway") when the
//	                  call asks for progress messages, then answers {"done": true}
//	conform.ask       only for a worker that follows rule 11, announced with "asks":
//	                  true: in a call with Toolbus-Ask-Key and Toolbus-Heartbeat, asks
//	                  one question, "conform asks", for {"word": string}, then answers
//	                  {"action": <the answer's action>, "content": <its content or null>};
//	                  in any other call, an error at once and no question
//
// The kit compares JSON values, not bytes: a worker may decode and encode
// them again, as long as numbers keep every digit.
//
// # What the worker's process gets
//
// The kit starts the command in a process group of its own, with the
// environment of the kit plus TOOLBUS_NATS_URL and TOOLBUS_PREFIX, and
// TOOLBUS_NATS_TOKEN, TOOLBUS_NATS_USER, TOOLBUS_NATS_PASSWORD or
// TOOLBUS_NATS_CREDS when the kit was given them (the variables `toolbus
// worker` reads), so that a worker may take its connection from there. It
// stops the worker with SIGTERM, and kills the process group when it does
// not exit in time.
//
// # The rules
//
// Each line names its rule by a short key (which [Config.Only] and
// `toolbus conform --only` accept) and by its place in PROTOCOL.md:
//
//	start         §1, §7   the worker starts and answers conform.echo
//	queue-group   §1       it serves in the queue group <prefix>-workers
//	envelope      §2, §3   ids, params, method and caller reach the handler unchanged; replies are well formed; rule 1
//	encoding      §4       str for bin, integers of any width, unknown keys, nil members, any key order
//	batch         §2       calls in flight together each get their own answer, and a slow one stalls no other
//	notification  rule 2   notifications are run and not answered; the worker keeps serving
//	errors        rule 4   a business error keeps its code and data
//	crash         rule 4   a crash is -32603 without a stack trace, and the worker keeps serving
//	version       §4       an envelope of another version is refused, never run
//	unreadable    §4       a payload that is not a call envelope is refused, never run
//	late          rule 3   a call past its deadline is not run
//	liveness      rule 8   ack, then a heartbeat every interval, nothing after the reply; none unasked
//	ack-delay     rule 8   an ack held back for Toolbus-Ack-Delay still comes, once and first, while a longer call runs
//	free-slots    rule 10  a reply asked with Toolbus-Name-Free names the worker's direct subject, and a call sent there is served
//	deadline      §2       the handler stops at Toolbus-Deadline
//	cancel        rule 7   a cancel message stops the running call
//	busy          rule 8   a call over the concurrency limit is refused busy at once
//	orphan        rule 9   a call nobody listens for any more is canceled
//	progress      rule 8   progress reports (Toolbus-Progress: report) are well formed and come before the reply
//	reply-subject §3       the reply, ack and beats come on the reply subject as given, one of the form
//	                       <prefix>.reply.<token>.<token> (revision 10); skipped when the kit may not listen there
//	announce      §9       each method announced on its own subject (revision 8), validly; the toolset listed; repeated every interval; a ping answered
//	ask           rule 11  skipped unless a tool declares "asks"; then conform.ask's question comes after the ack,
//	                       forged answers (unsealed, another key, another subject, another question) are
//	                       not taken and the sealed one is, a decline comes through, and a call without
//	                       the key (or without heartbeats) fails at once without a question
//	drain         rule 6   on SIGTERM: a leaving announcement of each method, no new calls, held calls answered, exit
package conform
