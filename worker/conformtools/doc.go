// Package conformtools serves the conformance toolset of schema/PROTOCOL.md
// (section 12) on a [worker.Runtime], so that `toolbus conform` can check
// the Go runtime the way it checks a worker written in any other language:
//
//	toolbus conform --nats nats://127.0.0.1:4222 -- toolbus worker --tools conform --jobs=false
//
// The tools exist only for that check; the package conform documents what
// each must answer, and [Register] is the Go runtime's implementation:
//
//	conform.echo      → {"id", "method", "params", "caller"} of the call as received
//	conform.sleep     {"ms": N} → {"slept_ms": N}, ending early at the deadline or a cancel
//	conform.serial    conform.sleep, one call at a time (concurrency 1)
//	conform.fail      → error 2001 with data {"conform": "fail"}
//	conform.panic     a crash of the handler
//	conform.progress  reports 50% "halfway", then → {"done": true}
//	conform.ask       asks "conform asks" for {"word": string}, then → {"action",
//	                  "content"} of the answer; it declares "asks", and a call that
//	                  cannot be asked fails at once
package conformtools
