package discovery

import (
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// DefaultRetention is how long a tool stays known after its last worker
// was seen: a week, so that a tool whose workers are scaled to zero over
// a weekend still takes jobs on Monday.
const DefaultRetention = 7 * 24 * time.Hour

// knownTool is what the registry knows of one tool, live or not.
type knownTool struct {
	compiled
	conflict bool
	// live is set while some worker advertises it.
	live bool
	// seen is when a worker of it was last seen: now while it is live.
	seen time.Time
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
	if k.conflict {
		s += "\x00conflict"
	}
	if k.live {
		s += "\x00live"
	}
	return s
}

// tool returns k as a [Tool] without workers, for the params check.
func (k *knownTool) tool() Tool {
	return Tool{Descriptor: k.desc, Conflict: k.conflict, params: k.params, key: k.key}
}

// refreshEvery is how often the bucket's record of a live tool is written
// again, so that it never ages out while the tool is served; a tool whose
// ingresses all stopped at once is then known for at least the retention
// less this.
func (r *Registry) refreshEvery() time.Duration {
	return min(r.retention/4, time.Hour)
}

// reconcileLocked brings the known tools up to date with the live
// catalogue at now: live tools take its descriptors, a tool whose last
// worker went is seen now for the last time, and a tool past its retention
// is forgotten. With a bucket, what changed is queued for writing.
func (r *Registry) reconcileLocked(now time.Time) {
	cat := r.catalogLocked()
	live := make(map[string]bool, len(cat.Tools))
	for _, t := range cat.Tools {
		live[t.Name] = true
		k := r.known[t.Name]
		if k == nil {
			k = &knownTool{}
			r.known[t.Name] = k
		}
		k.compiled = compiled{desc: t.Descriptor, params: t.params, key: t.key}
		k.conflict, k.live, k.seen = t.Conflict, true, now
		r.persistLocked(k, now)
	}
	for name, k := range r.known {
		switch {
		case live[name]:
		case k.live:
			k.live, k.seen = false, now
			r.persistLocked(k, now)
		case !k.current(now, r.retention):
			delete(r.known, name)
		}
	}
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
	r.store.queue(toolRecord{Descriptor: k.desc, Conflict: k.conflict, Seen: now})
}

// applyLocked takes in a record read from the bucket at now. A live tool
// keeps the descriptor its workers give; a tool known here only from the
// past takes the record's when it is newer.
func (r *Registry) applyLocked(rec toolRecord, now time.Time) {
	name := rec.Descriptor.Name
	if now.Sub(rec.Seen) > r.retention {
		return
	}
	k := r.known[name]
	if k != nil {
		if rec.Seen.After(k.stored) {
			k.stored = rec.Seen
		}
		if k.live || !rec.Seen.After(k.seen) {
			return
		}
	}
	if err := rec.Descriptor.Validate(); err != nil {
		r.log.Warn("ignored a known tool of the bucket", "method", name, "err", err)
		return
	}
	c, err := r.compileLocked(rec.Descriptor)
	if err != nil {
		r.log.Warn("ignored a known tool of the bucket", "method", name, "err", err)
		return
	}
	if k == nil {
		k = &knownTool{stored: rec.Seen}
		r.known[name] = k
	}
	k.compiled, k.conflict, k.seen = c, rec.Conflict, rec.Seen
}

// forgetLocked drops a tool that was deleted from the bucket, unless a
// worker serves it here.
func (r *Registry) forgetLocked(name string) {
	if k := r.known[name]; k != nil && !k.live {
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
		"method not found: no worker has announced "+method+"; check the name, or start a worker that serves it and submit again",
		map[string]any{"reason": schema.ReasonUnknownMethod, "method": method})
}
