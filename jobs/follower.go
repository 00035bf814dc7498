package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/internal/latest"
)

// How the watch of the records runs: it stays up watchLinger after its
// last follower left, so that followers that come one after the other (the
// calls promoted to jobs of a busy client) do not create a consumer each;
// creating it may take watchCreateTimeout; one that fails is made again
// after watchRetryMin, doubling up to watchRetryMax.
const (
	watchLinger        = 30 * time.Second
	watchCreateTimeout = 10 * time.Second
	watchRetryMin      = 100 * time.Millisecond
	watchRetryMax      = 10 * time.Second
)

// Why a follower ended before its job's final record.
var (
	// errGone: the record was deleted or expired.
	errGone = errors.New("jobs: the job's record is gone")
	// errStopped: the follower was stopped.
	errStopped = errors.New("jobs: stopped following the job")
	// errHubClosed: the connection to NATS is closed, or the service
	// shut down, and no record can be followed any more.
	errHubClosed = errors.New("jobs: jobs cannot be followed any more: the connection to NATS is closed or the service shut down")
)

// hub follows the records of jobs for every part of a process that waits
// on one (subscriptions over WebSocket, A2A streams and blocking sends,
// MCP calls with progress, calls promoted to jobs), with one watch of the
// whole bucket of records: a JetStream consumer per process, however many
// follow, instead of one per follower. Each update of a record is decoded
// once and offered to the followers of its job, each of which keeps only
// the newest record it has not read (so a slow one holds up neither the
// watch nor the others, and never queues).
//
// The watch starts with the first follower and stops [watchLinger] after
// the last one left. One that fails is made again with backoff; each time
// a watch is up, every follower's record is read again, so that what
// happened while none was up is not missed. The zero value is not ready:
// use [newHub]. It is safe for concurrent use.
type hub struct {
	st  *store
	log *slog.Logger
	// wait sleeps between attempts at a watch (tests stop it there).
	wait func(ctx context.Context, d time.Duration) bool

	mu sync.Mutex
	// byID holds the followers of each job, n counts them all.
	byID map[string]map[*follower]struct{}
	n    int
	// stop ends the running watch loop; nil when none runs.
	stop func()
	// idle stops the watch once it has had no follower for watchLinger.
	idle *time.Timer
	// closed is set when the connection closed: nothing can be followed.
	closed bool
}

func newHub(st *store, log *slog.Logger) *hub {
	return &hub{st: st, log: log, wait: ctxwait.Sleep, byID: map[string]map[*follower]struct{}{}}
}

// follower is one wait on a job's records. Its channel holds the newest
// record it has not read yet, newer than any it was offered before, and
// is closed after the job's final record or when the follow ends early
// (see [follower.err]).
type follower struct {
	h  *hub
	id string
	ch chan *stored

	// The fields below are guarded by h.mu.
	rev  uint64 // the revision of the newest record offered
	done bool   // ch is closed
	why  error  // why ch closed before a final record
}

// follow starts following job id and reads its record: the follower's
// channel holds it (or a newer one) at once, and is closed after it when
// it is final. A missing job is [errNotFound]; call stop when done.
func (h *hub) follow(ctx context.Context, id string) (*follower, error) {
	f := &follower{h: h, id: id, ch: make(chan *stored, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errHubClosed
	}
	fs := h.byID[id]
	if fs == nil {
		fs = map[*follower]struct{}{}
		h.byID[id] = fs
	}
	fs[f] = struct{}{}
	h.n++
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.stop == nil {
		h.start()
	}
	h.mu.Unlock()
	// The follower is in place before the read: an update after it
	// reaches the follower, and one before it is in the record read (or
	// known to the store, which reads again until a replica has it).
	rec, rev, err := h.st.get(ctx, id)
	if err != nil {
		f.stop()
		return nil, err
	}
	h.mu.Lock()
	f.offer(rec, rev)
	h.mu.Unlock()
	return f, nil
}

// records returns the follower's channel: see [follower].
func (f *follower) records() <-chan *stored { return f.ch }

// err returns why the channel closed before a final record: [errGone],
// [errStopped] or [errHubClosed]; nil when it is open, or closed after the
// final record.
func (f *follower) err() error {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return f.why
}

// stop ends the follow and closes the channel. It may be called more than
// once.
func (f *follower) stop() {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	fs, ok := h.byID[f.id]
	if _, in := fs[f]; !ok || !in {
		return
	}
	delete(fs, f)
	if len(fs) == 0 {
		delete(h.byID, f.id)
	}
	f.end(errStopped)
	h.n--
	if h.n == 0 && h.stop != nil && h.idle == nil {
		h.idle = time.AfterFunc(watchLinger, h.stopIdle)
	}
}

// offer gives the follower rec, revision rev of its record (nil: the
// record was deleted or expired), unless it has one as new. h.mu is held.
func (f *follower) offer(rec *stored, rev uint64) {
	if f.done || rev <= f.rev {
		return
	}
	f.rev = rev
	if rec == nil {
		f.end(errGone)
		return
	}
	latest.Offer(f.ch, rec)
	if rec.State.Final() {
		f.end(nil)
	}
}

// end closes the channel, after the record it holds if any. h.mu is held.
func (f *follower) end(why error) {
	if f.done {
		return
	}
	f.done, f.why = true, why
	close(f.ch)
}

// start runs a watch loop. h.mu is held.
func (h *hub) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go h.run(ctx)
}

// stopIdle stops the watch loop if it still has no follower.
func (h *hub) stopIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.idle = nil
	if h.n == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// run keeps a watch of the records up until ctx ends or the connection
// closes.
func (h *hub) run(ctx context.Context) {
	backoff := watchRetryMin
	for {
		w, stop, err := h.watch(ctx)
		if err == nil {
			h.reread(ctx)
			h.pump(ctx, w)
			stop()
		}
		if ctx.Err() != nil {
			return
		}
		if h.st.js.Conn().IsClosed() {
			h.close()
			return
		}
		if err != nil {
			h.log.Warn("cannot watch the job records; trying again", "in", backoff, "err", err)
		} else {
			h.log.Warn("the watch of the job records ended; watching again", "in", backoff)
		}
		if !h.wait(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, watchRetryMax)
	}
}

// watch creates the watch of every job's record, of updates from now on,
// and returns it with the function that stops it. The watch lives until
// it is stopped or ctx ends, but its creation is bounded by
// watchCreateTimeout: a server that refuses the request for want of
// permission never answers it.
func (h *hub) watch(ctx context.Context) (jetstream.KeyWatcher, func(), error) {
	return bus.WatchWithin(ctx, h.st.kv, jobKey(">"), watchCreateTimeout, jetstream.UpdatesOnly())
}

// reread reads the record of every job followed, for a watch that has
// just come up: an update written while no watch was up reaches the
// followers this way.
func (h *hub) reread(ctx context.Context) {
	h.mu.Lock()
	ids := make([]string, 0, len(h.byID))
	for id := range h.byID {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		rec, rev, err := h.st.get(ctx, id)
		switch {
		case errors.Is(err, errNotFound):
			h.gone(id)
		case err != nil:
			h.log.Warn("cannot read a followed job's record again", "id", id, "err", err)
		default:
			h.deliver(id, rec, rev)
		}
	}
}

// deliver offers revision rev of job id's record to its followers; a nil
// rec says the record was deleted or expired at rev.
func (h *hub) deliver(id string, rec *stored, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.byID[id] {
		f.offer(rec, rev)
	}
}

// gone ends the followers of job id, whose record was found missing.
func (h *hub) gone(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.byID[id] {
		f.end(errGone)
	}
}

// pump hands every update of the watch to the followers of its job, until
// the watch ends or ctx does. It never waits on a follower.
func (h *hub) pump(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				h.update(e)
			}
		}
	}
}

// update takes in one entry of the watch: the store learns its revision,
// and the followers of its job get its record.
func (h *hub) update(e jetstream.KeyValueEntry) {
	id, ok := strings.CutPrefix(e.Key(), jobKey(""))
	if !ok {
		return
	}
	put := e.Operation() == jetstream.KeyValuePut
	h.st.known.note(e.Key(), e.Revision(), !put)
	h.mu.Lock()
	followed := len(h.byID[id]) > 0
	h.mu.Unlock()
	if !followed {
		return
	}
	var rec *stored
	if put {
		rec = new(stored)
		if err := json.Unmarshal(e.Value(), rec); err != nil {
			h.log.Warn("cannot decode a job's record", "id", id, "err", err)
			return
		}
	}
	h.deliver(id, rec, e.Revision())
}

// close ends every follower with errHubClosed, stops the watch and makes
// every later follow fail: the connection is closed for good, or the
// service shuts down.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for id, fs := range h.byID {
		for f := range fs {
			f.end(errHubClosed)
		}
		delete(h.byID, id)
	}
	h.n = 0
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
}
