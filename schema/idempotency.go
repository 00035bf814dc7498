package schema

// MaxIdempotencyKey is the longest idempotency key a client may send.
const MaxIdempotencyKey = 255

// SetIdempotencyKey names each call of a message that expects an answer by
// the client's idempotency key (the Idempotency-Key header), in
// [Call.IdempotencyKey]: a message of one such call is named by the key
// alone; in a batch, each call is named by the key together with its id,
// so that a batch sent again with the same key and ids is answered call by
// call. An empty key names nothing.
func SetIdempotencyKey(calls []Call, key string) {
	if key == "" {
		return
	}
	n := 0
	for i := range calls {
		if !calls[i].IsNotification() {
			n++
		}
	}
	for i := range calls {
		c := &calls[i]
		switch {
		case c.IsNotification():
		case n == 1:
			c.IdempotencyKey = key
		default:
			c.IdempotencyKey = key + "\x00" + string(c.ID)
		}
	}
}
