package schema

// Headers and values of the liveness protocol (PROTOCOL.md, section 4,
// rule 8). An aggregator that sets [HeaderHeartbeat] on a call message
// asks the worker for progress messages on the call's reply subject: empty
// messages whose [HeaderProgress] says what they are. A reply never
// carries HeaderProgress, so an aggregator tells the two apart by it; a
// worker that does not know the protocol sends none, and an aggregator that
// does not ask gets none. A progress message may carry a reply subject of
// the worker's, on which NATS tells the worker that nobody listens for the
// call's answer any more (rule 9); an aggregator never answers it.
const (
	// HeaderHeartbeat, on a call message, is the interval in milliseconds
	// (decimal digits) at which the aggregator wants heartbeats.
	HeaderHeartbeat = "Toolbus-Heartbeat"
	// HeaderHeartbeatMisses, on a call message with HeaderHeartbeat, is
	// how many intervals without a progress message the aggregator waits
	// before it takes the call's worker for lost (decimal digits; 3 when
	// absent). A worker waits as many heartbeats in a row that nobody
	// heard before it cancels the call as orphaned.
	HeaderHeartbeatMisses = "Toolbus-Heartbeat-Misses"
	// HeaderProgress, on a message on a call's reply subject, marks it as
	// a progress message, not the reply; its value is one of the Progress
	// constants.
	HeaderProgress = "Toolbus-Progress"
)

// Values of [HeaderProgress].
const (
	// ProgressAck: a worker has taken the call; heartbeats follow.
	ProgressAck = "ack"
	// ProgressBeat: the worker holding the call is alive.
	ProgressBeat = "beat"
	// ProgressBusy: the worker is at its concurrency limit for the method
	// and did not take the call; the aggregator may publish it again for
	// another worker. Nothing of the call ran.
	ProgressBusy = "busy"
)
