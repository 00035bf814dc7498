// Package jobs runs toolbus tool calls as durable asynchronous jobs on
// JetStream: an agent submits a call, gets a job id at once, and polls the
// job's record from any ingress replica until the result is there.
//
// Two JetStream objects, named after the subject prefix P ("toolbus" by
// default), hold everything:
//
//   - the work-queue stream P_JOBS (upper-cased, characters outside
//     A-Z a-z 0-9 _ - become '_') of subjects
//     "P.jobs.queue.<caller token>.<method>", one message per queued job,
//     and "P.jobs.notify", one message per completion callback due;
//   - the KV bucket "P_jobs" of records: "job.<id>" is a job's [Record],
//     "idem.<sha256>" maps a caller's idempotency key to a job id and
//     the fingerprint of the submit (method, params, notify_url,
//     context_id, references), so that the key is refused for any other
//     submit.
//
// A [Service] (one per ingress) creates or updates both at start with its
// limits and answers the JSON-RPC methods rpc.jobs.submit, rpc.jobs.get,
// rpc.jobs.cancel, rpc.jobs.list and rpc.jobs.answer through
// [Service.ServeRPC]; once
// started it also delivers completion callbacks. Given a [MethodCheck]
// ([WithMethodCheck]; the ingress builds one from its registry of known
// tools), it refuses at submit a job that cannot run, and a job accepted
// for a method no worker serves now says so in its record's Waiting while
// it is queued. A [Runner] (one per
// ingress) runs the jobs with an [Invoker], a [BusInvoker] that sends each
// job to a worker as an ordinary call over the bus, so that workers need no
// JetStream: for each served pattern (">" for a BusInvoker) it takes jobs
// one caller after the other, each caller's through a durable consumer of
// its own with explicit acks (see fair.go), marks the record running, runs
// the call while renewing its lease with in-progress acks, writes the
// outcome and acks. A call that did not run (no worker, every worker busy,
// the bus down) gives the job back to the queue without counting an
// attempt, its record saying why it waits; a call whose worker was lost is
// an interrupted run (below).
//
// # Quotas and fairness
//
// Both JetStream objects have byte caps ([WithStoreBytes]). A named caller
// may have [DefaultCallerMaxQueued] jobs queued or running
// ([WithCallerMaxQueued]); the next submit is refused -32006 naming
// caller_max_queued_jobs. Dispatch is fair across callers: a free slot goes
// to the caller after the one served last, so one caller's backlog delays
// another caller's new job by about one job's run per slot.
//
// # Following jobs
//
// Whatever waits on a job's record in a process (a subscription, see
// [Service.Subscribe], which the front doors' streams and blocking sends
// use, or a call promoted to a job, see [Service.RunAsJob]) reads from one
// watch of the bucket of records that the service keeps while anyone
// follows: one JetStream consumer per service however many follow, each
// update decoded once and handed to the followers of its job, each of
// which keeps only the newest record it has not read, so that a slow one
// holds up nothing and queues nothing. A watch that fails is made again
// with backoff, and every followed record is then read again, so that a
// job that ended meanwhile is not missed. Reads of a record are direct
// gets, which need no consumer; as a replica of a replicated bucket may
// lag, a read older than a revision the process wrote or saw on its watch
// is made again. A named caller may have [DefaultCallerMaxSubscriptions]
// subscriptions open on a service, and all callers together
// [DefaultMaxSubscriptions] ([WithMaxSubscriptions]); the next is refused
// -32002 naming caller_max_subscriptions or max_subscriptions.
//
// # States and concurrency
//
// A job is queued, then running, then succeeded, failed or canceled, and a
// final state never changes. Every write of a record is a compare-and-set
// on its KV revision, so a cancel and a completion cannot overwrite each
// other: the later writer sees the earlier one's state and yields. A run is
// fenced by the stream sequence of its queue message and its attempt
// number, so a runner that lost its lease cannot overwrite the run that
// took over.
//
// A runner that dies mid-job stops renewing its lease; JetStream redelivers
// the job after the lease (the consumer's AckWait) to another runner, which
// finds the record still running (a worker lost mid-call is handled the
// same way, at once): a tool marked safe to retry runs again
// (attempts 2), any other fails with data.reason "interrupted_not_retryable"
// rather than running twice, and a job interrupted on each of its
// max_attempts fails with "attempts_exhausted". A tool's own error fails
// the job and is not retried.
//
// A running job whose tool asks its caller a question (rule 11 of
// PROTOCOL.md: the runner's call carries [schema.Call] Ask, and the
// aggregator hands the question over) is input_required, the question on
// its record, until its own caller answers with rpc.jobs.answer. The
// answer, checked against the question's schema, is written into the
// record; the runner holding the job follows the record (the watch of
// follower.go), hands the answer to the call to seal and publish to the
// worker, and clears it: the job is running again. A question unanswered
// when the run's time is up fails the job with "question_unanswered"; a
// run that ends otherwise takes the question off the record. A job
// submitted with can_ask false (the MCP front door's, for a client that
// cannot elicit) runs without Ask: its tool fails to ask at once, as in a
// synchronous call, rather than wait for an answer nobody can give.
//
// Cancel moves a queued or running job to canceled. A queued job's message
// stays in the queue until a runner fetches it, sees the record and drops
// it, so the job never runs. For a running job the service also publishes
// on the core subject "P.jobs.cancel.<id>", and the runner holding it
// cancels the tool's context at once; the runner also sees the canceled
// record at its next lease renewal, should that message be missed.
//
// # Conversations
//
// A submit may name its context (context_id), the jobs it follows up
// (references) and carry the submitter's message (message: an id, and
// text, data or the message as its protocol wrote it, content); the A2A
// front door sends all three. The message is the first of the record's
// history; the job adds its own messages as it goes, each new text of its
// progress and its failure or cancel, named "<id>-<place>". The history
// lives in the record, within [MaxHistoryBytes] and the record's
// max_payload: the oldest messages are dropped first and counted in
// history_dropped, and a result takes the room of the history before it
// is refused. context_id and references are part of the idempotency
// fingerprint; the message is not, so a retried submit with a new message
// id names the same job.
//
// # Retention
//
// Finished records expire after a TTL (default 24h) through JetStream's
// per-message TTLs (nats-server 2.11 and later): the bucket allows message
// TTLs and keeps a marker for a minute after an expiry (its LimitMarkerTTL),
// and only writes of a record in a final state carry the TTL, so queued and
// running jobs never expire. The bucket keeps one revision per key, so the
// expiry of the last revision removes the record. The idempotency entry of
// a job gets the same TTL when the job ends.
//
// # Completion callbacks
//
// A job submitted with a notify_url (http or https) gets its final record
// POSTed there when it ends. Each attempt carries [schema.HeaderTimestamp], the
// Unix seconds at which it was sent, and [schema.HeaderSignature], "v1=" and the
// hex HMAC-SHA256 under the configured secret of the timestamp, a dot and
// the raw body ([Sign]). A receiver recomputes it over the raw body,
// compares in constant time, and refuses a timestamp more than
// [ReplayWindow] (5 minutes) from its clock, so that a captured callback
// cannot be replayed later; [Verify] does all three. A failed attempt is
// recorded on the job and retried with exponential backoff, up to a
// bounded number of attempts; the result stays in the record whatever
// happens to the callback. Callbacks are delivered at least once: a
// receiver should key them on the job id ([schema.HeaderJobID]).
//
// Callbacks never reach loopback, private, link-local, CGNAT, multicast,
// unspecified, broadcast or reserved addresses unless the operator
// allowlists them ([WithCallbackAllow]). A notify_url whose host is, or
// resolves to, such an address is refused at submit with -32602; the
// connection of every attempt resolves the host again, checks each address
// and dials the one it checked, so a name that resolves inside later is
// refused then, and no redirect is followed. A failed attempt is recorded
// as a class ("timeout", "refused", "blocked", "status 503", ...), never as
// the receiver's words, so a callback cannot be used to read what answers
// at an address.
//
// # Observability
//
// [Service.Stats] gives an operator the count of kept jobs by state and
// the newest jobs, across callers, reading at most [MaxStatsRecords]
// records. [Service.Collector] exports those counts, and each method's
// queued and running jobs (the backlog an autoscaler reads), to
// Prometheus, cached between scrapes, with the [Counters] of jobs submitted and finished; a
// [Runner] counts the jobs it ends into counters of its own or, in a
// process that runs both, the service's ([WithRunnerCounters]).
package jobs
