package ingress

import (
	"net/http"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// The Idempotency-Key header ([schema.HeaderIdempotencyKey]) makes the
// calls of a POST /rpc, REST or MCP request idempotent: a duplicate in
// flight waits for the first and gets its answer, and a duplicate sent
// after the first finished gets the stored answer, within the dispatcher's
// TTL (see [schema.SetIdempotencyKey] for how it names each call). The
// header is ignored on a WebSocket upgrade: a connection has no one key
// for its many messages.

// idempotency refuses a request whose Idempotency-Key header is not a
// valid key; [Server.callHeaders] hands a valid one to the calls.
func (s *Server) idempotency(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(schema.HeaderIdempotencyKey)
		if key == "" || isUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		if !validIdempotencyKey(key) {
			start := time.Now()
			s.logRequest(r, "rpc", start, s.refuse(w, http.StatusBadRequest, schema.NewError(schema.CodeInvalidRequest,
				"invalid request: Idempotency-Key must be 1 to 255 printable ASCII characters",
				map[string]any{"header": schema.HeaderIdempotencyKey})))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func validIdempotencyKey(k string) bool {
	if len(k) > schema.MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
