package discovery

import (
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// DefaultRetention is how long a served tool stays known after its last
// worker was seen: a week, so that a tool whose workers are scaled to zero
// over a weekend still takes jobs on Monday.
const DefaultRetention = 7 * 24 * time.Hour

// ServedAfter is how long workers must keep announcing a tool before it
// counts as served: from the first announcement of an unbroken span in
// which some worker announced it to the latest announcement of that span.
// A served tool stays known for the retention ([WithRetention]); one that
// never was, for [UnservedRetention]. A worker that announces names for a
// moment, however many, makes none of them served: it must keep
// announcing each for this long, every interval.
const ServedAfter = 15 * time.Minute

// UnservedRetention is how long a tool that was never served (see
// [ServedAfter]) stays known after its last worker was seen, unless the
// retention is shorter. Its record is then deleted from the bucket of
// known tools rather than left there for the bucket's retention.
const UnservedRetention = time.Hour

// knownTool is what the registry knows of one tool, live or not.
type knownTool struct {
	compiled
	// live is set while some worker advertises it.
	live bool
	// seen is when a worker of it was last seen: now while it is live.
	seen time.Time
	// since is when its current live span began; heard is when a worker
	// last announced it. served is set once heard is ServedAfter past
	// since, here or by any registry writing to the bucket, and stays.
	since, heard time.Time
	served       bool
	// absent is when, while the tool is live, the last worker giving
	// its descriptor went; zero while one gives it, or while the tool is
	// not live. After takeoverAfter the descriptor in force replaces it.
	absent time.Time
	// others is the list of workers last logged as advertising a
	// descriptor other than the one in force, so that a conflict is
	// logged when it begins or changes, not at every announcement.
	others string
	// stored is the latest seen time the bucket holds, written by any
	// registry; zero when the bucket holds none.
	stored time.Time
	// wrote is the state this registry last wrote to the bucket, so that
	// it writes again only when its own view changes (two registries that
	// disagree for a moment never answer each other's writes).
	wrote string
}

// state sums what a write of k says beyond its time.
func (k *knownTool) state() string {
	s := k.key
	if k.served {
		s += "\x00served"
	}
	if k.live {
		s += "\x00live"
	}
	return s
}

// tool returns k as a [Tool] without workers, for the params check.
func (k *knownTool) tool() Tool {
	return Tool{Descriptor: k.desc, params: k.params, key: k.key}
}

// current reports whether k is still known at now, kept for keep after
// its last worker was seen.
func (k *knownTool) current(now time.Time, keep time.Duration) bool {
	return k.live || now.Sub(k.seen) <= keep
}

// keepFor returns how long k stays known after its last worker was seen.
func (r *Registry) keepFor(k *knownTool) time.Duration { return r.keep(k.served) }

func (r *Registry) keep(served bool) time.Duration {
	if served {
		return r.retention
	}
	return min(r.retention, UnservedRetention)
}

// takeoverAfter is how long a live tool's known descriptor may go without
// a worker that gives it before the descriptor in force, another
// worker's, replaces it as the tool's incumbent (and in the bucket): long
// enough that an ingress that just started, or a worker that missed a
// ping, is heard first, so that whoever announces first after a gap does
// not become the incumbent for that alone. Meanwhile calls are validated
// against the descriptor of the workers there are.
const takeoverAfter = missedAnnouncements * bus.MaxAnnounceInterval

// refreshEvery is how often the bucket's record of a live tool is written
// again, so that it never ages out while the tool is served; a tool whose
// ingresses all stopped at once is then known for at least the retention
// less this.
func (r *Registry) refreshEvery() time.Duration {
	return min(r.retention/4, time.Hour)
}

// reconcileLocked brings every known tool up to date at now (see
// [Registry.reconcileToolLocked]).
func (r *Registry) reconcileLocked(now time.Time) {
	for name := range r.live {
		r.reconcileToolLocked(name, now)
	}
	for name := range r.known {
		if r.live[name] == nil {
			r.reconcileToolLocked(name, now)
		}
	}
}

// reconcileToolLocked brings the known tool of name up to date with the
// live one at now: a live tool's incumbent is its descriptor in force,
// unless that is a newcomer's and the incumbent's workers went less than
// takeoverAfter ago, and it counts towards being served; a tool whose last
// worker went is seen now for the last time; and a tool past its
// retention is forgotten, and its record deleted when it was never
// served. With a bucket, what changed is queued for writing.
func (r *Registry) reconcileToolLocked(name string, now time.Time) {
	t, k := r.live[name], r.known[name]
	if t == nil {
		switch {
		case k == nil:
		case k.live:
			k.live, k.seen, k.others, k.absent = false, now, "", time.Time{}
			r.persistLocked(k, now)
		case !k.current(now, r.keepFor(k)):
			delete(r.known, name)
			if r.store != nil && !k.served {
				r.store.queueDelete(name)
			}
		}
		return
	}
	if k == nil {
		k = &knownTool{heard: now}
		r.known[name] = k
	}
	if !k.live {
		k.since = now
	}
	switch {
	case k.key == "" || k.key == t.key:
		k.compiled, k.absent = compiled{desc: t.Descriptor, params: t.params, key: t.key}, time.Time{}
	case k.absent.IsZero():
		k.absent = now
	case now.Sub(k.absent) >= takeoverAfter:
		r.log.Info("no worker gives the known descriptor of a tool any more; the one its workers give replaces it",
			"method", name, "after", takeoverAfter)
		k.compiled, k.absent = compiled{desc: t.Descriptor, params: t.params, key: t.key}, time.Time{}
	}
	k.live, k.seen = true, now
	if !k.served && k.heard.Sub(k.since) >= ServedAfter {
		k.served = true
	}
	if t.others != k.others {
		if t.others != "" {
			r.complainLocked("conflict:"+name, "workers advertise a descriptor other than the one in force; the one in force stays, and calls are validated against it",
				"method", name, "workers", t.others)
		}
		k.others = t.others
	}
	r.persistLocked(k, now)
}

// persistLocked queues a write of k when this registry's view of it
// changed since its last write, or when the bucket's record of a live tool
// is due for a refresh.
func (r *Registry) persistLocked(k *knownTool, now time.Time) {
	if r.store == nil {
		return
	}
	state := k.state()
	if state == k.wrote && !(k.live && now.Sub(k.stored) >= r.refreshEvery()) {
		return
	}
	k.wrote, k.stored = state, now
	r.store.queue(toolRecord{Descriptor: k.desc, Served: k.served, Seen: now})
}

// applyLocked takes in a record read from the bucket at now, and reports whether the live catalogue changed. A tool not known
// here takes the record as it is, and one known only from the past takes
// the record's descriptor when it is newer. A live tool takes the
// record's descriptor as its incumbent, in force while one of its workers
// here gives it: the bucket holds the incumbent, so every registry
// sharing it puts the same in force. Being served is taken from any
// record.
func (r *Registry) applyLocked(rec toolRecord, now time.Time) bool {
	name := rec.Descriptor.Name
	k := r.known[name]
	// A record older than the last one this registry wrote or read (its
	// own write coming back late) says nothing new of the descriptor.
	newest := k == nil || !rec.Seen.Before(k.stored)
	if k != nil {
		k.served = k.served || rec.Served
		if rec.Seen.After(k.stored) {
			k.stored = rec.Seen
		}
	}
	if k != nil && !k.live && !rec.Seen.After(k.seen) {
		r.settledLocked(k, rec)
		return false
	}
	c, err := r.recordLocked(rec)
	if err != nil {
		r.complainLocked("record", "ignored a known tool of the bucket that cannot be used; the bucket's retention removes it",
			"method", clip(name, maxProblemText), "err", err)
		return false
	}
	switch {
	case k == nil:
		// Past its retention it is swept, and its record deleted when
		// it was never served.
		k = &knownTool{compiled: c, seen: rec.Seen, stored: rec.Seen, served: rec.Served}
		k.wrote = k.state()
		r.known[name] = k
		return false
	case !k.live:
		k.compiled, k.seen = c, rec.Seen
		r.settledLocked(k, rec)
		return false
	case c.key != k.key && newest:
		k.compiled, k.absent = c, time.Time{}
		r.settledLocked(k, rec)
		return true
	}
	r.settledLocked(k, rec)
	return false
}

// settledLocked notes that the bucket holds k's view when rec says what
// this registry would write of it, so that it does not write it again.
func (r *Registry) settledLocked(k *knownTool, rec toolRecord) {
	if key, err := canonical(rec.Descriptor); err == nil && key == k.key && rec.Served == k.served {
		k.wrote = k.state()
	}
}

// recordLocked checks and compiles the descriptor of a record of the
// bucket, which older ingresses may have written without the limits of
// today.
func (r *Registry) recordLocked(rec toolRecord) (compiled, error) {
	if err := rec.Descriptor.Validate(); err != nil {
		return compiled{}, err
	}
	if err := bus.CheckDescriptorLimits(rec.Descriptor); err != nil {
		return compiled{}, err
	}
	return r.compileLocked(rec.Descriptor)
}

// forgetLocked drops a tool that was deleted from the bucket. One that a
// worker serves here stays, and is written again.
func (r *Registry) forgetLocked(name string) {
	k := r.known[name]
	switch {
	case k == nil:
	case k.live:
		k.wrote = ""
	default:
		delete(r.known, name)
	}
}

// Check judges a call of method that is to run later, as a job does: it
// returns why the call would wait, or the error that refuses it now. A
// method no worker serves now but that is known ([Registry.Known]) waits
// for a worker ([schema.ReasonNoWorkers]); one served now waits for
// nothing (""). A method that is not known is refused -32601 with reason
// [schema.ReasonUnknownMethod]. With validate, params that break the known
// schema are refused -32602 with the data of the synchronous check
// ([Layer]).
func (r *Registry) Check(method string, params json.RawMessage, validate bool) (waiting string, e *schema.Error) {
	t, live := r.Lookup(method)
	if !live {
		r.mu.Lock()
		k := r.knownLocked(method, r.now())
		if k != nil {
			t = k.tool()
		}
		r.mu.Unlock()
		if k == nil {
			return "", unknownMethod(method)
		}
		waiting = schema.ReasonNoWorkers
	}
	if validate {
		if e := checkParams(t, params); e != nil {
			return "", e
		}
	}
	return waiting, nil
}

func unknownMethod(method string) *schema.Error {
	return schema.NewError(schema.CodeMethodNotFound,
		"method not found: no worker has announced "+method+"; "+discoverHint+" and submit again",
		map[string]any{"reason": schema.ReasonUnknownMethod, "method": method})
}
