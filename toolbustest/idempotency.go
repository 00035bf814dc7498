package toolbustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
)

// WithIdempotency gives every ingress of the cluster the same JetStream
// bucket of idempotency records, kept ttl (zero:
// [aggregator.DefaultIdempotencyTTL]), so that an Idempotency-Key header
// collapses duplicates across ingress replicas.
func WithIdempotency(ttl time.Duration) Option {
	return func(o *options) { o.idem, o.idemTTL = true, ttl }
}

// idempotencyBucket opens the cluster's bucket of idempotency records on
// nc.
func idempotencyBucket(t testing.TB, nc *nats.Conn, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := aggregator.IdempotencyBucket(ctx, js, bus.DefaultPrefix, ttl, 1, 0)
	if err != nil {
		t.Fatalf("toolbustest: %v", err)
	}
	return kv
}
