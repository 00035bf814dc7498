//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/toolbus/toolbus/schema"
)

// callTimeout is the deadline of every call of the loads.
const callTimeout = 2 * time.Second

// steady is the load the fault scenarios run under: four senders of
// batches of ten calls, mostly sleeps of up to 600ms, each call under a 2s
// deadline, bounded to a few minutes at most.
func steady(c *Cluster, name string) LoadConfig {
	return LoadConfig{
		Name:        name,
		URLs:        c.URLs,
		Senders:     4,
		BatchSize:   10,
		Timeout:     callTimeout,
		Calls:       Mix(600 * time.Millisecond),
		Pause:       20 * time.Millisecond,
		MaxBatches:  5000,
		MaxDuration: 3 * time.Minute,
	}
}

// runFor lets a load run for d.
func runFor(d time.Duration) { time.Sleep(d) }

// checkClean fails the test unless every id of a load was answered ok.
func checkClean(t *testing.T, name string, results []Result) {
	t.Helper()
	for _, r := range results {
		if r.Outcome != AnsweredOK {
			t.Errorf("%s: %s is %v (code %d), want answered-ok", name, r.ID, r.Outcome, r.Code)
			return
		}
	}
}

// succeeded returns the ids of the jobs of recs that succeeded: each was
// run to its end by some worker.
func succeeded(recs map[string]*Job) []string {
	var ids []string
	for id, r := range recs {
		if r != nil && r.State == "succeeded" {
			ids = append(ids, id)
		}
	}
	return ids
}

// servedOK returns, for each id that some worker ran to success, how many
// times it was so run, leaving out worker skip.
func servedOK(calls []Served, skip int) map[string]int {
	out := make(map[string]int)
	for i, s := range calls {
		if i == skip {
			continue
		}
		for id, codes := range s {
			for _, code := range codes {
				if code == 0 {
					out[id]++
				}
			}
		}
	}
	return out
}

// checkTimeoutsBelongTo fails the test unless every error of results is a
// timeout (-32001) of a call that no worker but the faulty one ran. It
// returns how many calls timed out.
func checkTimeoutsBelongTo(t *testing.T, c *Cluster, results []Result, faulty int) int {
	t.Helper()
	others := servedOK(c.Calls(), faulty)
	n := 0
	for _, r := range results {
		if r.Outcome != AnsweredError {
			continue
		}
		n++
		if r.Code != -32001 {
			t.Errorf("%s answered %d, want -32001 (timed out) or a result", r.ID, r.Code)
		}
		if others[r.ID] > 0 {
			t.Errorf("%s timed out, yet a healthy worker ran it", r.ID)
		}
	}
	return n
}

// TestFanOut: a steady load spreads over the three worker containers;
// every worker gets work, every call is answered ok and is run by exactly
// one worker.
func TestFanOut(t *testing.T) {
	c := Start(t)
	load := StartLoad(t, steady(c, "fanout"))
	runFor(6 * time.Second)
	results, _ := load.StopAndCheck()
	checkClean(t, "fanout", results)

	var answered []string
	for _, r := range results {
		answered = append(answered, r.ID)
	}
	calls := c.CallsLogged(answered)
	for i, s := range calls {
		t.Logf("worker-%d ran %d calls", i+1, len(s))
		if len(s) == 0 {
			t.Errorf("worker-%d ran no call, want every worker to get work", i+1)
		}
	}
	ran := servedOK(calls, -1)
	for _, r := range results {
		if ran[r.ID] != 1 {
			t.Errorf("%s was run %d times by the workers, want 1", r.ID, ran[r.ID])
		}
	}
}

// TestWorkerKilled: a worker is SIGKILLed while it holds calls of batches
// in flight. Its calls time out; every other call of those batches is
// answered; batches sent after the kill route around it at once.
func TestWorkerKilled(t *testing.T) {
	c := Start(t)
	const victim = 0
	// Longer sleeps than the steady load's, so that the worker surely
	// holds calls when it dies.
	cfg := steady(c, "killed")
	cfg.Calls = Mix(1200 * time.Millisecond)
	load := StartLoad(t, cfg)
	runFor(3 * time.Second)
	killed := time.Now()
	c.Kill(c.Worker[victim])
	runFor(5 * time.Second)
	results, batches := load.StopAndCheck()

	timedOut := checkTimeoutsBelongTo(t, c, results, victim)
	t.Logf("%d calls held by the killed worker timed out", timedOut)
	if timedOut == 0 {
		t.Errorf("no call timed out: the kill hit no batch in flight")
	}
	// "At once": within half a second, which is how long the kill and the
	// NATS server's noticing the closed connection may take.
	for _, r := range results {
		if batches[r.Batch].Sent.After(killed.Add(500*time.Millisecond)) && r.Outcome != AnsweredOK {
			t.Errorf("%s, sent %v after the kill, is %v (code %d), want answered-ok",
				r.ID, batches[r.Batch].Sent.Sub(killed).Round(time.Millisecond), r.Outcome, r.Code)
		}
	}
}

// TestWorkerPaused: a worker freezes (docker pause) as a hung backend
// does. Only its calls time out, each batch is answered within its
// deadline, and once it thaws every call is answered ok again.
func TestWorkerPaused(t *testing.T) {
	c := Start(t)
	const victim = 1
	load := StartLoad(t, steady(c, "paused"))
	runFor(2 * time.Second)
	c.Pause(c.Worker[victim])
	runFor(6 * time.Second)
	c.Unpause(c.Worker[victim])
	results, batches := load.StopAndCheck()

	timedOut := checkTimeoutsBelongTo(t, c, results, victim)
	t.Logf("%d calls held by the paused worker timed out", timedOut)
	if timedOut == 0 {
		t.Errorf("no call timed out: the pause hit no call")
	}
	// A batch waits for its slowest call's deadline, never longer; the
	// slack covers HTTP and a loaded machine.
	const slack = 1500 * time.Millisecond
	for i, b := range batches {
		if took := b.Done.Sub(b.Sent); took > callTimeout+slack {
			t.Errorf("batch %d took %v, want at most %v", i, took.Round(time.Millisecond), callTimeout+slack)
		}
	}

	after := StartLoad(t, steady(c, "paused-after"))
	runFor(3 * time.Second)
	res, _ := after.StopAndCheck()
	checkClean(t, "paused-after", res)
}

// TestNATSNodeStopped: one NATS node of three (the one holding the most
// connections) stops, then starts again.
// The ingress and worker connections on it move to the other nodes; every
// id is answered, and the node costs only the calls that were in its
// hands: a call fails only if it was in flight while the node's clients
// moved, and only if its answer left its worker while the worker or the
// ingress was moving (the test logs how many failed, and why). A worker
// that moved answers the calls it held through its new node (protocol
// revision 10): none of its answers is refused. Jobs submitted before and
// after all finish, once each.
func TestNATSNodeStopped(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	var jobIDs []string
	submit := func(n int) {
		for i := range n {
			url := c.URLs()[i%len(c.URLs())]
			id, err := SubmitJob(ctx, url, "sleep", map[string]int{"ms": 1000 + rand.IntN(1500)})
			if err != nil {
				t.Fatalf("submit a job: %v", err)
			}
			jobIDs = append(jobIDs, id)
		}
	}
	submit(12)

	load := StartLoad(t, steady(c, "nats-stop"))
	runFor(2 * time.Second)
	// Stop the node that holds the most toolbus connections, so that the
	// test is sure to move clients.
	victim, held := 0, -1
	for i := range NATSNodes {
		if n := c.Clients(ctx, i); n > held {
			victim, held = i, n
		}
	}
	through := c.ClientsOf(ctx, victim)
	var names []string
	for _, ctr := range through {
		names = append(names, c.Name(ctr))
	}
	stopped := time.Now()
	c.Stop(c.NATS[victim], 10*time.Second)
	t.Logf("nats-%d stopped with %d toolbus connections, of %v", victim+1, held, names)
	runFor(6 * time.Second)
	restarted := time.Now()
	c.StartAgain(c.NATS[victim])
	c.WaitNATS(ctx, victim)
	t.Logf("nats-%d is back and healthy", victim+1)
	runFor(3 * time.Second)
	results, batches := load.StopAndCheck()
	if got := c.Reconnects(); got < held {
		t.Errorf("%d toolbus connections reconnected, want the %d of the stopped node", got, held)
	}

	moved := checkLostWithNode(t, c, nodeStop{victim: victim, through: through, stopped: stopped, restarted: restarted}, results, batches)
	before := len(jobIDs)

	submit(6)
	after := StartLoad(t, steady(c, "nats-after"))
	runFor(3 * time.Second)
	res, _ := after.StopAndCheck()
	checkClean(t, "nats-after", res)

	recs := c.WaitJobs(jobIDs, 90*time.Second)
	tally := CountJobs(jobIDs, recs, c.JobRunsLogged(succeeded(recs)))
	// A job of a method not safe to run twice that was running while the
	// node's clients moved may have lost its answer in the move (core
	// NATS delivers at most once), and then ends interrupted: it was in
	// the node's hands, as the calls above. Any other job succeeds once.
	inHands := 0
	for _, id := range jobIDs[:before] {
		if r := recs[id]; r != nil && r.State == "failed" && r.Error != nil && r.Error.Data.Reason == "interrupted_not_retryable" &&
			r.StartedAt != nil && r.StartedAt.Before(moved) && r.FinishedAt != nil && r.FinishedAt.After(stopped) {
			inHands++
		}
	}
	t.Logf("tally jobs: %v; %d of the failed were running while the node's clients moved", tally, inHands)
	if tally.Lost != 0 || tally.Duplicated != 0 || tally.BadAttempts != 0 || tally.Succeeded+inHands != len(jobIDs) {
		t.Errorf("%v, want every job succeeded once, but for jobs interrupted while the node's clients moved (%d)", tally, inHands)
	}
}

// nodeStop is a NATS node stopped under load: its index, the ingress
// and worker containers connected through it, when it was stopped and
// when it was started again.
type nodeStop struct {
	victim             int
	through            []testcontainers.Container
	stopped, restarted time.Time
}

// checkLostWithNode fails t unless every call of results that failed was
// in the hands of the stopped node: in flight while its clients moved to
// other nodes, and lost where they were (the moved ingress refused it,
// its answer left the worker while the ingress or the worker that ran it
// was moving, or it never reached a worker), never on a path of parts all
// connected elsewhere. It also fails t when a worker that moved had an
// answer refused. It logs how many failed of those in its hands, and why.
func checkLostWithNode(t *testing.T, c *Cluster, st nodeStop, results []Result, batches []Batch) (moved time.Time) {
	t.Helper()
	// Each client of the node had moved once it reconnected, and all of
	// them once the last did; the routes learn their interest a moment
	// later.
	moved = st.stopped
	movedAt := make(map[testcontainers.Container]time.Time)
	for _, ctr := range st.through {
		at := c.LoggedAt(ctr, "nats reconnected", st.stopped, st.restarted)
		if len(at) == 0 {
			t.Errorf("%s logged no reconnection after nats-%d stopped", c.Name(ctr), st.victim+1)
			continue
		}
		movedAt[ctr] = at[len(at)-1]
		moved = maxTime(moved, at[len(at)-1])
	}
	t.Logf("the clients of nats-%d had moved %v after it was stopped", st.victim+1, moved.Sub(st.stopped).Round(time.Millisecond))
	moved = moved.Add(routeGrace)
	ingressThrough := make(map[string]bool)    // by URL
	ingressMoved := make(map[string]time.Time) // by URL, for those through the node
	for i, in := range c.Ingress {
		ingressThrough[c.URL(i)] = slices.Contains(st.through, in)
		if at, ok := movedAt[in]; ok {
			ingressMoved[c.URL(i)] = at.Add(routeGrace)
		}
	}
	workerThrough := make(map[int]bool)
	anyWorkerThrough := false
	for i, w := range c.Worker {
		workerThrough[i] = slices.Contains(st.through, w)
		anyWorkerThrough = anyWorkerThrough || workerThrough[i]
	}
	ends := callEnds(c)
	// A call was in the node's hands when it was in flight while the
	// clients moved, and its ingress or any worker (the queue group may
	// have given it to one) was connected through the node.
	exposed := func(r Result) bool {
		b := batches[r.Batch]
		inFlight := b.Sent.Before(moved) && (b.Done.IsZero() || b.Done.After(st.stopped))
		return inFlight && (ingressThrough[b.URL] || anyWorkerThrough)
	}
	// Which workers ran each call, and with what code.
	ranBy := make(map[string][]string) // as worker-N:code
	ranThrough := make(map[string]bool)
	for i, s := range c.Calls() {
		for id, codes := range s {
			for _, code := range codes {
				ranBy[id] = append(ranBy[id], fmt.Sprintf("worker-%d:%d", i+1, code))
			}
			ranThrough[id] = ranThrough[id] || workerThrough[i]
		}
	}
	inHands, onIngress := 0, 0
	failed := make(map[string]int) // by method and cause
	why := make(map[string]int)    // by where the call was lost
	nFailed := 0
	for _, r := range results {
		b := batches[r.Batch]
		if exposed(r) {
			inHands++
			if ingressThrough[b.URL] {
				onIngress++
			}
		}
		if r.Outcome != AnsweredError {
			continue
		}
		nFailed++
		failed[r.Method+" "+r.Cause()]++
		if nFailed <= 5 {
			t.Logf("failed: %s (%s) %s, its batch to ingress %s sent %v after the stop and answered %v after it; run by %v",
				r.ID, r.Method, r.Cause(), b.URL, b.Sent.Sub(st.stopped).Round(time.Millisecond), b.Done.Sub(st.stopped).Round(time.Millisecond), ranBy[r.ID])
		}
		switch {
		case r.Code != schema.CodeTimeout && r.Code != schema.CodeUnavailable:
			t.Errorf("%s answered %s, want a result, -32001 (timed out) or -32003 (unavailable)", r.ID, r.Cause())
		case !exposed(r):
			t.Errorf("%s (%s) failed with %s, though its batch was sent %v after the stop and answered %v after it, outside the node's hands",
				r.ID, r.Method, r.Cause(), b.Sent.Sub(st.stopped).Round(time.Millisecond), b.Done.Sub(st.stopped).Round(time.Millisecond))
		case r.Reason == schema.ReasonBusDisconnected:
			if !ingressThrough[b.URL] {
				t.Errorf("%s answered %s by an ingress that was not connected through nats-%d", r.ID, r.Cause(), st.victim+1)
			}
			why["refused by an ingress away from NATS"]++
		case len(ranBy[r.ID]) == 0:
			why["never reached a worker"]++
		default:
			// Its answer left the worker just after the worker logged
			// the call's end. Before the worker had reconnected, it may
			// have gone down with the node's connection; before the
			// ingress had its reply subscription again, and the routes
			// had learnt it, nobody heard it. After both, it reached
			// the ingress: the worker's new node lets it publish there.
			lost := ""
			for _, e := range ends[r.ID] {
				switch {
				case workerThrough[e.worker] && e.at.Before(movedAt[c.Worker[e.worker]]):
					lost = "answered by a worker as it moved"
				case ingressThrough[b.URL] && e.at.Before(ingressMoved[b.URL]) && lost == "":
					lost = "answered while its ingress moved"
				}
			}
			if lost == "" {
				t.Errorf("%s failed with %s, though the workers that ran it (%v) answered it after they and its ingress (through nats-%d: %v) were connected again: %v",
					r.ID, r.Cause(), ranBy[r.ID], st.victim+1, ingressThrough[b.URL], ends[r.ID])
				continue
			}
			why[lost]++
		}
	}
	// A worker that moved answers the calls it held on their reply
	// subjects under toolbus.reply, which its user may publish on
	// through any node (protocol revision 10): none is refused, as
	// answers on the ingress's inbox were, which NATS had let only the
	// connection given the call publish on (allow_responses).
	refused := 0
	for i, w := range c.Worker {
		if !workerThrough[i] {
			continue
		}
		for _, line := range c.Lines(w) {
			var l struct {
				Msg string `json:"msg"`
				Err string `json:"err"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "nats async error" && strings.Contains(l.Err, "Permissions Violation for Publish") {
				refused++
			}
		}
	}
	t.Logf("%d calls failed of the %d in the hands of nats-%d (in flight while its clients moved; %d of them on an ingress connected through it): %s (%s); the workers that moved logged %d publications refused for want of permission",
		nFailed, inHands, st.victim+1, onIngress, Causes(failed), Causes(why), refused)
	if refused > 0 {
		t.Errorf("the workers that moved logged %d publications refused for want of permission, want none: their answers go under toolbus.reply, which deploy/nats/cluster-secure.conf lets them publish on", refused)
	}
	return moved
}

// callEnd is when a worker logged the end of a call: its answer left
// then.
type callEnd struct {
	worker int
	at     time.Time
}

func (e callEnd) String() string {
	return fmt.Sprintf("worker-%d at %s", e.worker+1, e.at.Format("15:04:05.000"))
}

// callEnds reads from the workers' logs when each ran each call, by
// request id.
func callEnds(c *Cluster) map[string][]callEnd {
	out := make(map[string][]callEnd)
	for i, w := range c.Worker {
		for _, line := range c.Lines(w) {
			var l struct {
				Time time.Time `json:"time"`
				Msg  string    `json:"msg"`
				ID   string    `json:"id"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "call" {
				continue
			}
			var id string
			if json.Unmarshal([]byte(l.ID), &id) != nil {
				id = l.ID
			}
			out[id] = append(out[id], callEnd{worker: i, at: l.Time})
		}
	}
	return out
}

// routeGrace is how long after a client reconnected to another NATS node
// its subscriptions may take to reach the other nodes over the routes.
const routeGrace = 500 * time.Millisecond

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestWorkerCutOff: a worker is cut off the network, then joined again.
// Its calls time out while NATS still counts it in the queue group, every
// id is answered, and once it is back it serves calls again and the
// cluster answers everything ok.
func TestWorkerCutOff(t *testing.T) {
	c := Start(t)
	const victim = 2
	load := StartLoad(t, steady(c, "cutoff"))
	runFor(2 * time.Second)
	cut := time.Now()
	c.Disconnect(c.Worker[victim])
	runFor(8 * time.Second)
	c.Connect(c.Worker[victim])
	before := len(c.Calls()[victim])
	// Back once it runs calls again: its client notices the dead
	// connection by a failed write or ping and reconnects.
	deadline := time.Now().Add(90 * time.Second)
	for len(c.Calls()[victim]) == before {
		if time.Now().After(deadline) {
			t.Fatalf("worker-%d ran no call in 90s after it was joined again", victim+1)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("worker-%d runs calls again %v after the cut", victim+1, time.Since(cut).Round(time.Millisecond))
	results, _ := load.StopAndCheck()
	timedOut := checkTimeoutsBelongTo(t, c, results, victim)
	t.Logf("%d calls held by the cut-off worker timed out", timedOut)

	// The NATS server drops the old connection once its pings go
	// unanswered (ping_interval 5s, ping_max 2: within 15s of the cut);
	// from then on nothing is routed to it.
	if wait := time.Until(cut.Add(25 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	servedBefore := len(c.Calls()[victim])
	after := StartLoad(t, steady(c, "cutoff-after"))
	runFor(4 * time.Second)
	res, _ := after.StopAndCheck()
	checkClean(t, "cutoff-after", res)
	if len(c.Calls()[victim]) == servedBefore {
		t.Errorf("worker-%d ran no call after it was joined again", victim+1)
	}
}

// TestRollingRestart: every worker in turn gets SIGTERM, drains and starts
// again, under load: not one call fails.
func TestRollingRestart(t *testing.T) {
	c := Start(t)
	load := StartLoad(t, steady(c, "rolling"))
	runFor(2 * time.Second)
	for i, w := range c.Worker {
		began := time.Now()
		c.Stop(w, DrainTimeout+10*time.Second)
		// 0, not 137: it drained and exited by itself before Docker's
		// grace period ran out.
		if code := c.ExitCode(w); code != 0 {
			t.Errorf("worker-%d exited with %d after SIGTERM, want 0", i+1, code)
		}
		c.StartAgain(w)
		c.WaitLog(w, `"msg":"worker ready"`, 2, time.Minute)
		t.Logf("worker-%d drained and restarted in %v", i+1, time.Since(began).Round(time.Millisecond))
		runFor(time.Second)
	}
	results, _ := load.StopAndCheck()
	checkClean(t, "rolling", results)
}

// TestJobsSurviveWorkerKillAndIngressRestart: jobs are submitted through
// both ingress replicas; a worker is SIGKILLed while it runs some and one
// ingress restarts meanwhile. No job is lost and none runs to its end
// twice: the killed worker's jobs end failed as interrupted (the demo
// sleep is not registered as safe to run twice), every other one
// succeeds once, and both replicas answer for all of them.
func TestJobsSurviveWorkerKillAndIngressRestart(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	const jobs = 30
	var ids []string
	for i := range jobs {
		id, err := SubmitJob(ctx, c.URL(i%Ingresses), "sleep", map[string]int{"ms": 2000 + rand.IntN(1000)})
		if err != nil {
			t.Fatalf("submit job %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	// The kill must hit running jobs: wait until both runners have all
	// their jobs out, so that worker-1 holds some of them unless every
	// one went to the other two workers (a chance of (2/3)^16).
	waitRunning(t, c, ids, Ingresses*JobConcurrency)
	cfg := steady(c, "jobs-sync")
	load := StartLoad(t, cfg)
	runFor(1500 * time.Millisecond)
	c.Kill(c.Worker[0])
	t.Logf("worker-1 killed")
	c.StopIngress(1, 30*time.Second)
	c.StartAgain(c.Ingress[1])
	t.Logf("ingress-2 restarted")
	runFor(2 * time.Second)
	results, _ := load.StopAndCheck()
	timedOut := checkTimeoutsBelongTo(t, c, results, 0)
	t.Logf("%d sync calls held by the killed worker timed out", timedOut)

	recs := c.WaitJobs(ids, 2*time.Minute)
	// Both replicas, the restarted one too, read every record.
	for _, id := range ids {
		for i := range Ingresses {
			if _, err := GetJob(ctx, c.URL(i), id); err != nil {
				t.Errorf("ingress-%d: rpc.jobs.get %s: %v", i+1, id, err)
			}
		}
	}
	tally := CountJobs(ids, recs, c.JobRunsLogged(succeeded(recs)))
	t.Logf("tally jobs: %v", tally)
	interrupted := tally.Failed["interrupted_not_retryable"]
	if tally.Lost != 0 || tally.Duplicated != 0 || tally.BadAttempts != 0 ||
		tally.Succeeded+interrupted != jobs || len(tally.Failed) > 1 {
		t.Errorf("%v, want none lost, none duplicated, each succeeded once or failed as interrupted", tally)
	}
	if interrupted == 0 {
		t.Errorf("no job was interrupted: the kill hit no running job")
	}
	if most := Ingresses * JobConcurrency; interrupted > most {
		t.Errorf("%d jobs were interrupted, want at most the %d the ingresses' runners had in flight", interrupted, most)
	}
}

// waitRunning waits until at least n of the jobs ids are running, read
// through the ingress replicas in turn, or fails the test after a minute.
func waitRunning(t *testing.T, c *Cluster, ids []string, n int) {
	t.Helper()
	giveUp := time.Now().Add(time.Minute)
	for {
		running := 0
		for i, id := range ids {
			if rec, err := GetJob(context.Background(), c.URL(i%Ingresses), id); err == nil && rec.State == "running" {
				running++
			}
		}
		if running >= n {
			t.Logf("%d jobs running", running)
			return
		}
		if time.Now().After(giveUp) {
			t.Fatalf("%d of %d jobs running after a minute, want at least %d", running, len(ids), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
