package jobs

import (
	"context"
	"sync/atomic"
	"time"
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
