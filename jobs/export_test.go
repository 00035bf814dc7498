package jobs

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// HookCollector makes the collector of s read the time from now and count
// its calls of Stats; it returns that count. Call it before the first
// scrape.
func HookCollector(s *Service, now func() time.Time) (reads func() int64) {
	var n atomic.Int64
	c := s.collector
	stats := c.stats
	c.stats = func(ctx context.Context, recent int) (Stats, error) {
		n.Add(1)
		return stats(ctx, recent)
	}
	c.now = now
	return n.Load
}

// WithCallbackNet makes the callbacks' guard resolve host names with r and
// dial the addresses it admitted with dial, so that tests reach no network.
func WithCallbackNet(r egress.Resolver, dial egress.DialFunc) Option {
	return func(c *config) error {
		c.egress = append(c.egress, egress.WithResolver(r), egress.WithDialer(dial))
		return nil
	}
}

// QueueLegacy queues a job of method as a version before per-caller queues
// did: on the method's subject alone, with its record. It returns the id.
func QueueLegacy(ctx context.Context, s *Service, method string, params []byte) (string, error) {
	now := time.Now().UTC()
	rec := &stored{JobRecord: schema.JobRecord{ID: s.ids.next(now), Method: method, Params: params, State: schema.JobQueued,
		MaxAttempts: s.cfg.maxAttempts, CreatedAt: now, TTLSeconds: int64(s.cfg.ttl / time.Second)}}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if _, err := s.st.js.Publish(ctx, s.st.names.runSubject(method), b); err != nil {
		return "", err
	}
	if _, err := s.st.create(ctx, rec); err != nil {
		return "", err
	}
	return rec.ID, nil
}
