// Package demo is a built-in toolset for trying toolbus and testing it: tools
// that echo, sleep, fail on request, burn CPU and fetch web pages, and the
// methods of the examples in the JSON-RPC 2.0 specification.
//
// [Register] adds them all to a [worker.Runtime]:
//
//	echo          the params, byte for byte
//	sleep         {"ms": N} → {"slept_ms": N}, ending early with the call's context
//	              and reporting progress in tenths when it runs as a job
//	confirm       {"action"} → {"action", "confirmed"}, asking its caller "proceed with
//	              <action>?"; a declined question → {"action", "confirmed": false,
//	              "declined": true}; it asks (its descriptor says "asks": true), so
//	              it runs as a job: a synchronous call fails at once with -32000
//	              "cannot_ask", saying to submit it with rpc.jobs.submit
//	fail          {"code", "message", "data"}, each optional → exactly that error
//	sha256        {"data", "rounds"}, rounds optional (1) → {"digest", "rounds"},
//	              hashing rounds times
//	fetch_page    {"url"} → {"title", "content", "status_code", ...}
//	subtract      [42, 23] or {"minuend": 42, "subtrahend": 23} → 19
//	sum           [1, 2, 4] → 7
//	get_data      → ["hello", 5]
//	update, notify_hello, notify_sum   accept anything and answer null
//
// Every member shown is required unless it is marked optional: params
// without one are answered -32602 naming it ("/ms"), as [worker.Typed]
// holds them to the schema the tools announce.
//
// fetch_page fetches http and https URLs on public addresses. It refuses
// loopback, private, link-local and other internal addresses, also when a
// name resolves to one or a redirect leads to one, unless they are admitted
// with [WithFetchAllow] (toolbus worker --fetch-allow), and it reports a
// failed fetch by its class (refused, timeout, dns, ...) without the words
// of whatever answered.
package demo
