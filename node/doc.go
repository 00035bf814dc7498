// Package node assembles the parts of one toolbus process on the NATS
// connection it is given, so that the binary (cmd/toolbus, through fx) and
// the in-process test cluster (toolbustest) build the same object graph
// from one place.
//
// A process has one typed config: [GatewayConfig] for an ingress,
// [WorkerConfig] for a worker, each with its Default… constructor and a
// Validate that names the flag to change. [GatewayFlags], [WorkerFlags],
// [TracingFlags] and [RemoteFlags] (of a [bus.RemoteConfig]) are the one
// table of their flags, which [Bind] binds into a config; [Explain] adds
// to a condition that stops a process's startup for good the flags that
// fix it. [NewGatewayFrom] and [NewWorkerFrom] build the process a config
// describes, the test cluster's included: the aggregator, the ingress,
// the jobs service and runner and the A2A door take their settings from
// the config ([withJobs] and [withA2A] take its [JobsConfig] and
// [A2AConfig]), and keys held in memory from [WithAuth], never another
// package's options passed through.
//
// A [Gateway] is an ingress process: the aggregator, the ingress's HTTP
// server, the registry of announced tools, the jobs service and the
// idempotency store, its readiness and its status service. A [Worker] is a
// worker process: a [worker.Runtime] with its tools, the bridges to the
// servers of other protocols it serves the tools of, and its status
// service; [worker.ProbeHandler] serves its probes and metrics.
//
// Both start in any order with NATS: what needs JetStream (the jobs
// service, the idempotency store, the job runner) is set up in the
// background under a [bus.Startup], which says what the process waits for,
// and the calls that need it are refused -32003 (retryable) until then.
//
// The package exists because the composition needs every other package:
// ingress may not import jobs, and worker neither jobs nor ingress. Only
// cmd/toolbus and toolbustest import it.
package node
