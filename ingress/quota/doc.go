// Package quota holds the ingress's bounds per caller and per client
// address, each a count that admits or refuses with the -32002 answer
// naming its limit:
//
//   - [Limiter]: a token bucket per caller ([RateLimit]), taken once per
//     call;
//   - [Bytes]: the bytes of answers held per caller and in all until they
//     are written, charged per message ([Charge]);
//   - [Conns]: the connections open per client IP address on the
//     listeners it wraps.
//
// The ingress decides which caller a call is (the empty caller without
// authentication) and where each count is taken
// (github.com/toolbus/toolbus/ingress.WithRateLimit,
// WithMaxBytesInFlight, WithMaxConnsPerAddr).
package quota
