package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// DefaultToolsMaxBytes caps the bucket of known tools: room for tens of
// thousands of descriptors.
const DefaultToolsMaxBytes int64 = 64 << 20

// storeTimeout bounds one write to the bucket, and opening its watch.
const storeTimeout = 10 * time.Second

// watchStopWithin bounds how long [Registry.Close] waits for the watch of
// the bucket to end. Ending it deletes its consumer on the server, a
// request that waits out its timeout when the server is gone; the watch
// then ends by itself that much later, and a shutdown does not wait.
const watchStopWithin = time.Second

// ToolsBucket creates the JetStream key-value bucket of the known tools of
// the cluster of subjects, named after their [bus.Subjects.Token]
// ("<prefix>_tools"), or
// brings an existing one to this configuration when it differs: every
// registry of the cluster shares it ([Registry.Persist]). A tool's record
// expires retention after its last write (zero means [DefaultRetention]);
// replicas is its JetStream replica count (zero means 1; 3 on a three-node
// cluster); maxBytes caps it (zero means [DefaultToolsMaxBytes]).
func ToolsBucket(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, retention time.Duration, replicas int, maxBytes int64) (jetstream.KeyValue, error) {
	if retention < 0 || replicas < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("discovery: tools retention, replicas and max bytes must not be negative, got %v, %d and %d", retention, replicas, maxBytes)
	}
	if subjects.IsZero() {
		return nil, errors.New("discovery: tools bucket of zero subjects")
	}
	if retention == 0 {
		retention = DefaultRetention
	}
	if maxBytes == 0 {
		maxBytes = DefaultToolsMaxBytes
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      subjects.Token() + "_tools",
		Description: "toolbus known tools: each tool's descriptor and when a worker of it was last seen",
		TTL:         retention,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxBytes:    maxBytes,
	}
	kv, err := bus.KeyValue(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery: known tools: %w", err)
	}
	return kv, nil
}

// toolRecord is one known tool as the bucket holds it, under the key
// [toolKey] of its name.
type toolRecord struct {
	// Descriptor is the tool's descriptor in force.
	Descriptor schema.Descriptor `json:"descriptor"`
	// Served is set once the tool was served (see [ServedAfter]); a
	// record without it, as older ingresses wrote them, is of a tool that
	// never was.
	Served bool `json:"served,omitempty"`
	// Seen is when a worker of it was last seen.
	Seen time.Time `json:"seen"`
}

// toolKey is the bucket key of a tool: its name in unpadded base64url,
// since names and patterns hold characters ('*', '>', ':') that keys may
// not.
func toolKey(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

// toolStore writes the registry's known tools to the bucket and follows
// what every registry writes there.
type toolStore struct {
	kv  jetstream.KeyValue
	log func(msg string, args ...any)
	// stale reports whether a record may be deleted: one of a tool that
	// was never served, past its retention.
	stale func(toolRecord) bool

	mu      sync.Mutex
	pending map[string]storeOp // by name; the latest wins
	wake    chan struct{}

	// ctx ends with stop, so that a write in flight does not hold it up.
	ctx  context.Context
	quit context.CancelFunc
	wg   sync.WaitGroup
}

// storeOp is a write to the bucket: rec, or, when rec is nil, the
// deletion of the record if it is stale.
type storeOp struct {
	rec *toolRecord
}

// queue asks for rec to be written.
func (s *toolStore) queue(rec toolRecord) {
	s.enqueue(rec.Descriptor.Name, storeOp{rec: &rec})
}

// queueDelete asks for the record of name to be deleted if it is stale
// when it is read: every registry sweeps a tool that was never served,
// and a record that some registry wrote again in the meantime stays.
func (s *toolStore) queueDelete(name string) {
	s.enqueue(name, storeOp{})
}

func (s *toolStore) enqueue(name string, op storeOp) {
	s.mu.Lock()
	s.pending[name] = op
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop ends the writer and the watch and waits for them.
func (s *toolStore) stop() {
	s.quit()
	s.wg.Wait()
}

// write writes what is queued until stop. A write that fails is logged
// and not retried: the record is written again with the tool's next
// change or refresh, and meanwhile every registry keeps its own view.
func (s *toolStore) write() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		pending := s.pending
		s.pending = map[string]storeOp{}
		s.mu.Unlock()
		for name, op := range pending {
			if op.rec == nil {
				if err := s.deleteStale(name); err != nil {
					s.log("a tool that was never served was not deleted from the bucket; the bucket's retention removes it later", "method", name, "err", err)
				}
				continue
			}
			b, err := json.Marshal(op.rec)
			if err == nil {
				ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
				_, err = s.kv.Put(ctx, toolKey(name), b)
				cancel()
			}
			if err != nil {
				s.log("known tool not written to the bucket; it stays known to this ingress", "method", name, "err", err)
			}
		}
	}
}

// deleteStale deletes the record of name if it is stale, unless another
// registry writes it in the meantime. Several registries may try at once;
// a delete that finds the record changed reads it again.
func (s *toolStore) deleteStale(name string) error {
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	for range 3 {
		e, err := s.kv.Get(ctx, toolKey(name))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var rec toolRecord
		if json.Unmarshal(e.Value(), &rec) == nil && !s.stale(rec) {
			return nil
		}
		err = s.kv.Delete(ctx, toolKey(name), jetstream.LastRevision(e.Revision()))
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
	}
	return nil
}

// Persist keeps the registry's known tools in kv (made by [ToolsBucket])
// and follows what the other registries of the cluster write there, until
// [Registry.Close]: a tool announced to one ingress is known to all, and
// after a restart. It returns once it has read what kv holds (ctx bounds
// that), and then writes the tools it learnt from announcements before.
// Until it is called, the registry knows only what it heard itself. It
// may succeed once.
func (r *Registry) Persist(ctx context.Context, kv jetstream.KeyValue) error {
	if kv == nil {
		return errors.New("discovery: nil bucket")
	}
	r.mu.Lock()
	busy := r.store != nil || r.closed
	r.mu.Unlock()
	if busy {
		return errors.New("discovery: registry already persisted, or closed")
	}
	// The watch lives as long as its context (nats.go unsubscribes when
	// it ends), so it gets one of its own; ctx and storeTimeout bound only
	// the reading of what kv holds.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	loading, endLoading := context.WithTimeout(ctx, storeTimeout)
	defer endLoading()
	stopLoading := context.AfterFunc(loading, cancel)
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("discovery: watch the known tools: %w", err)
	}
	stopWatch := func() {
		cancel()
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			_ = w.Stop()
			for range w.Updates() { // closed once the subscription is
			}
		}()
		t := time.NewTimer(watchStopWithin)
		defer t.Stop()
		select {
		case <-ended:
		case <-t.C:
			r.log.Warn("the watch of the known tools did not end within a second (NATS unreachable?); not waiting for it")
		}
	}
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				stopWatch()
				return errors.New("discovery: watch of the known tools ended")
			case e == nil: // every record read
				loaded = true
			default:
				r.apply(e)
			}
		case <-loading.Done():
			stopWatch()
			return fmt.Errorf("discovery: read the known tools: %w", loading.Err())
		}
	}
	if !stopLoading() {
		stopWatch()
		return fmt.Errorf("discovery: read the known tools: %w", loading.Err())
	}
	s := &toolStore{kv: kv, log: r.log.Warn, pending: map[string]storeOp{}, wake: make(chan struct{}, 1),
		stale: func(rec toolRecord) bool { return !rec.Served && r.now().Sub(rec.Seen) > r.keep(false) }}
	s.ctx, s.quit = context.WithCancel(context.Background())
	r.mu.Lock()
	if r.store != nil || r.closed {
		r.mu.Unlock()
		s.quit()
		stopWatch()
		return errors.New("discovery: registry already persisted, or closed")
	}
	r.store = s
	r.reconcileLocked(r.now())
	r.mu.Unlock()
	s.wg.Go(s.write)
	s.wg.Go(func() {
		defer stopWatch()
		for {
			select {
			case <-s.ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					r.log.Warn("the watch of the known tools ended; this ingress knows only what it hears from now on")
					return
				}
				if e != nil {
					r.apply(e)
				}
			}
		}
	})
	return nil
}

// apply takes in one entry of the bucket.
func (r *Registry) apply(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		name, err := base64.RawURLEncoding.DecodeString(e.Key())
		if err == nil {
			r.mu.Lock()
			r.forgetLocked(string(name))
			r.mu.Unlock()
		}
		return
	}
	var rec toolRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || toolKey(rec.Descriptor.Name) != e.Key() {
		r.log.Warn("ignored an unreadable record in the bucket of known tools", "key", e.Key())
		return
	}
	r.mu.Lock()
	now := r.now()
	changed := r.applyLocked(rec, now)
	if changed {
		r.refreshLocked(rec.Descriptor.Name, now)
	}
	watchers := r.changedLocked(changed)
	r.mu.Unlock()
	notify(watchers)
}
