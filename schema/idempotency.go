package schema

import "context"

// MaxIdempotencyKey is the longest idempotency key a client may send.
const MaxIdempotencyKey = 255

type idempotencyKey struct{}

// WithIdempotencyKey returns a context that carries the client's
// idempotency key (the Idempotency-Key header) to the dispatcher of the
// calls made under it. An empty key returns ctx unchanged.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, idempotencyKey{}, key)
}

// IdempotencyKey returns the idempotency key ctx carries, or "".
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKey{}).(string)
	return k
}
