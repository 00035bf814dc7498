package worker

// Middleware wraps a [Handler] with behaviour of its own: logging, metrics,
// authorisation, retries.
type Middleware func(Handler) Handler

// Chain composes middleware into one. The first is the outermost: a call goes
// through outer, then others in order, then the handler, and the result comes
// back the opposite way. Chain(a, b, c)(h) is a(b(c(h))).
func Chain(outer Middleware, others ...Middleware) Middleware {
	return func(next Handler) Handler {
		for i := len(others) - 1; i >= 0; i-- {
			next = others[i](next)
		}
		return outer(next)
	}
}
