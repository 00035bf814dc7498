// Package fair shares a bounded window of work among flows (the callers of
// an ingress), so that while two callers are busy each gets about half of
// it, whatever the size of their batches or the number of their
// connections. It is a state machine with no goroutine and no timer of its
// own: every method takes the time it is called at, and the owner arms one
// timer for [Scheduler.NextWake]. The ingress's fairness layer drives it
// (see package ingress); its tests drive it on a clock moved by hand.
//
// # Queues and order
//
// Every flow has a FIFO queue of entries. Entries leave the queues for the
// window in start-time fair queuing order: an entry's start tag is the
// finish tag of the entry before it in its flow, or the virtual time when
// its flow was idle; its finish tag is its start tag plus its cost divided
// by its flow's weight; the window takes the queued entry with the
// smallest start tag, and the virtual time moves to it. A flow that turns
// busy starts at the current virtual time, so it neither waits for the
// flows already busy nor gets credit for the time it was idle; a busy flow
// of weight w gets w shares of the window while others are busy, and all
// of it while they are not. No flow with queued entries starves: the
// virtual time reaches its head's tag after a bounded number of other
// admissions.
//
// An entry's cost is its share of work: 1 for a call, and one more per
// [CostUnit] of its params ([Cost]), so that a caller of large payloads is
// charged for the bytes it makes the ingress copy and check. A body read
// but not parsed yet is an entry too, of its bytes alone, so that parsing
// a caller's large batch waits for that caller's turn instead of holding
// up another's single call.
//
// A flow's queue holds at most [Config.FlowMaxQueued] of cost; what does
// not fit is refused at once ([ErrQueueFull]), with a wait to suggest
// ([Scheduler.RetryAfter]). An entry's deadline holds while it waits: at
// its deadline it leaves the queue as expired and never enters the window.
// An exempt flow ([Flow.Exempt]) never waits: its entries enter the window
// at once, even past its seats, so that the others yield to them.
//
// A flow alone pays for no queue: [Scheduler.AdmitAlone] lets its
// entries into the window at once when nothing is queued, no other flow
// was admitted lately, no round waits, pacing is off, the flow is not
// exempt (an exempt flow's entries enter at once anyway) and the seats
// take them all, with
// the tags and counts [Scheduler.Enqueue] would have given them. The
// owner queues what it refuses.
//
// # The window
//
// The window has [Config.Seats] seats: the entries being worked on. The
// seats are what fairness shares, and they must bound the work that
// competes for the ingress's CPU and for the workers' queues, where calls
// are served in arrival order: a call that enters the window waits behind
// at most the seats' worth of others, and the calls of a flood wait in
// their caller's queue instead of in front of everyone's. A small window
// is fair and quick for calls that are work (an echo flood); it would
// throttle calls that merely wait on a worker (a tool that sleeps three
// seconds), which take no CPU of the ingress while they wait.
//
// The scheduler tells them apart by time. An entry that has held its seat
// for the hold without an answer is waiting on a worker rather than being
// worked on: it leaves its seat, which the next entry takes, and counts
// as waiting until it is done. The hold adapts to the work: it is
// [holdFactor] times a moving average of how long the entries answered
// within [Config.HoldMax] took (in their seats or after leaving them),
// within [Config.HoldMin] and [Config.HoldMax]. Under an echo flood the
// calls in the window take about the seats' worth of work each, so the
// hold grows with the load and they keep their seats; a burst that left
// its seats before the hold had learned teaches it as its calls come
// back. Ten thousand calls that sleep for seconds teach nothing: they
// leave their seats one hold after they enter, so the window takes about
// Seats/hold of them a second (128,000 at the defaults when nothing
// else runs) and none waits for another to finish. What bounds the calls
// waiting on workers is then the dispatcher's own in-flight caps, per
// caller and in all.
//
// The price is a gray zone: a tool that takes about HoldMax to answer
// counts as work, and its calls keep their seats while they run, so that
// at most Seats of them run at once on an ingress. An operator whose
// tools wait tens of milliseconds on something other than the ingress or
// the workers' CPU raises the seats, or lowers HoldMax.
//
// The seats are not a rate: a fast machine serves more calls through the
// same window, and a call's latency under a flood is about the seats'
// worth of calls, whatever the flood's size.
//
// # Rounds
//
// On a saturated core a Go process polls the network only when its run
// queues are empty, and otherwise every 10 ms, so a caller with one call
// in flight gets about one call through per poll whatever its share of
// the window: the window's order only helps the calls that have been
// read. So while more than one flow is active (two have entries queued,
// or another flow than the last one admitted was admitted within the last
// 200 ms), the window works in rounds: it takes at most [Config.Round]
// entries ([DefaultRound]), then sets [Moves.AwaitPoll] and takes no more
// until the owner calls [Scheduler.Polled] after the process's next
// network poll. A busy process polls once it has run what it admitted,
// and the requests that poll reads are queued before the next round is
// chosen, each at its start tag: a caller's next call waits for about a
// round, not for the poller's 10 ms. Deadlines and holds go on while a
// round waits (see [Scheduler.Tick]); a flow alone is never held for a
// poll, and a Round below 0 sets no bound. The owner makes the poll
// happen: the ingress writes to a pipe whose reader is parked in the
// network poller, which wakes it with the connections. While
// [Scheduler.Competing], the ingress also works a large batch's parse,
// planning and answers in steps that each wait for a poll.
//
// # Pacing
//
// Pacing keeps the process's CPU from saturating while more than one flow
// is active. On a saturated core a Go process polls the network only when
// its run queues are empty, and otherwise every 10 ms, so a caller with
// one call in flight gets about one call through per poll whatever its
// share of the window; the window's order only helps the calls that have
// been read. With a CPU target below 1 ([Config.CPUTarget]; pacing is off
// by default), while two flows or more have been admitted lately and the
// process uses more than the target of its CPUs, the window admits at a
// pace: a rate that starts at what was admitted, falls by a tenth each
// period the process stays above the target, never below a quarter of
// where it started, and rises by a tenth each period the process stays
// well below it; it is dropped once it no longer binds or one flow is
// left. The idle moments it leaves let the process read every
// connection's next request, whose entry then goes first by its start
// tag. A flow alone is never paced.
package fair
