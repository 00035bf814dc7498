package bus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchWithin creates a watch of kv's keys and returns it with the
// function that stops it. The watch lives until it is stopped or ctx
// ends, but its creation is bounded by within: a server that refuses the
// request for want of permission never answers it. A creation that
// passes within returns [context.DeadlineExceeded].
func WatchWithin(ctx context.Context, kv jetstream.KeyValue, keys string, within time.Duration, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	created, timedOut := false, false
	timer := time.AfterFunc(within, func() {
		mu.Lock()
		defer mu.Unlock()
		if !created {
			timedOut = true
			cancel()
		}
	})
	w, err := kv.Watch(wctx, keys, opts...)
	timer.Stop()
	mu.Lock()
	created = true
	late := timedOut
	mu.Unlock()
	if err == nil && late {
		_ = w.Stop()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return w, func() { _ = w.Stop(); cancel() }, nil
}
