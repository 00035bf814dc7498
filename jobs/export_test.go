package jobs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
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
