// Package bench measures toolbus over HTTP and WebSocket: it is the engine
// of the `toolbus bench` command.
//
// [Load] is a closed-loop load generator: a fixed number of workers each
// POST one JSON-RPC request after another to a URL for a while, check every
// answer, and record latencies in a bounded histogram. [Matrix] runs a
// load round against several [Target]s (the plain net/http handler
// [PlainEcho], a reverse proxy to it, `toolbus dev`, the split deployment,
// 10-call batches) in alternating rounds on the same machine, so that noise
// from other work falls on all alike; its config's Load may run each round
// in a load generator process of its own, whose [Result] comes back as
// JSON with its histogram. [OutsideVerdicts] judges the goals on the
// ratios of one run. [Compare] is the same for two targets.
//
// [InFlight] sends batches of slow calls at once, so that thousands of
// calls are in flight in the process measured, and reads its resident
// memory meanwhile. [RunInFlightSplit] sends them through one ingress of a
// split deployment and reads the memory of its three processes together.
//
// [FanOut] and [SlowBackend] send batches rather than load: a batch of slow
// calls that should run side by side, and a batch where one call outlives its
// Toolbus-Timeout deadline while the others must still answer. Each checks
// every id of every answer and reports the wall time of each batch.
//
// [Loop] is the same closed loop around any operation. [Jobs] runs it over
// the durable jobs methods through package client: rpc.jobs.get of a
// finished job, then rpc.jobs.submit of fast jobs, whose running it waits
// for. [WebSocket] runs it for echo calls from many callers sharing one
// WebSocket connection, and for the same calls over HTTP, in alternating
// rounds.
//
// [Tenants] measures what one caller's flood of batches costs another's
// echo calls, in rounds without and with the flood. It runs both callers
// in its process; [RunTenants] runs the same rounds with each caller in
// load generator processes of its own, so that the flood's client work
// never delays the victim's calls.
//
// The Report functions print the measurements as tables, with a [Verdict]
// per goal of the bench command (see the Goal constants); those of scenarios
// that measure latencies then draw them as a text histogram, log-spaced
// buckets shared by the two sides compared, from the same bounded histogram
// the percentiles come from.
//
// A [Progress] given to a scenario's config shows, on a terminal, how far
// the scenario has got while it runs; the caller starts it before and stops
// it after, which clears its line before the report is printed.
//
// The scenarios take URLs. [Run], [RunScale], [RunTenants] and
// [RunInFlightSplit] are the commands `toolbus bench`, `bench scale`,
// `bench tenants` and `bench inflight-split`: they start what is measured
// as child processes of the toolbus program, through the one supervisor
// of package proc, run the scenarios against them and report. The children that measure or serve a baseline are the same
// program again, whose hidden commands call [LoadChild], [ServeChild] and
// [TenantsLoadChild]; a child has [ChildEnv] set and starts none of its
// own. The in-process scenarios of [Run] ask the command for a cluster
// ([StartCluster]), since the command owns the assembly of a process.
package bench
