package ingress

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// restPattern is the route of the REST adapter. A method name holding "/"
// is written with %2F in the path.
const restPattern = "/v1/tools/{method}/invoke"

// RequestIDHeader is the header in which a REST client may name its
// request; the answer carries the id in the same header and in its body.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds a client's request id; a longer one is replaced.
const maxRequestID = 128

// notJSON is the answer to a REST body that is not JSON.
func notJSON() *schema.Error {
	return schema.NewError(schema.CodeParseError, "parse error: the body is not valid JSON", nil)
}

// serveREST handles POST /v1/tools/{method}/invoke and logs one line.
func (s *Server) serveREST(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.logRequest(r, "rest", start, s.rest(w, r))
}

// rest answers one REST call. The body is the call's params: a JSON object
// or array, or nothing for no params. The call takes the same path as a
// JSON-RPC request with the request id as its id: the same limits, method
// checks, deadline (Toolbus-Timeout) and dispatcher.
func (s *Server) rest(w http.ResponseWriter, r *http.Request) outcome {
	rid := requestID(r.Header.Get(RequestIDHeader))
	w.Header().Set(RequestIDHeader, rid)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return s.restError(w, rid, http.StatusMethodNotAllowed, schema.NewError(schema.CodeInvalidRequest,
			"invalid request: HTTP method must be POST",
			map[string]any{"http_method": r.Method, "allow": http.MethodPost}))
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return s.restError(w, rid, http.StatusUnsupportedMediaType, schema.NewError(schema.CodeInvalidRequest,
			"invalid request: Content-Type must be application/json",
			map[string]any{"content_type": ct}))
	}
	hdr, terr := s.callHeaders(r)
	if terr != nil {
		return s.restError(w, rid, 0, terr)
	}
	body, err := readBody(w, r, s.cfg.limits.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			got := int64(-1)
			if r.ContentLength > tooBig.Limit {
				got = r.ContentLength
			}
			return s.restError(w, rid, 0, schema.LimitError("max_body_bytes", tooBig.Limit, got))
		}
		o := s.restError(w, rid, 0, schema.NewError(schema.CodeParseError, "parse error: reading body failed", nil))
		o.reason = "read body: " + err.Error()
		return o
	}
	// A body of 16 KiB or more waits for its caller's turn before it is
	// parsed, as a POST /rpc body does (see [Server.awaitTurn]).
	hdr, endTurn, werr := s.awaitTurn(r.Context(), hdr, body)
	if werr != nil {
		return s.restError(w, rid, 0, werr)
	}
	turn := sync.OnceFunc(endTurn)
	defer turn()
	params := bytes.TrimSpace(body)
	switch {
	case len(params) == 0:
		params = nil
	case params[0] != '{' && params[0] != '[':
		if !json.Valid(params) {
			return s.restError(w, rid, 0, notJSON())
		}
		return s.restError(w, rid, 0, schema.NewError(schema.CodeInvalidParams,
			"invalid params: the body must be a JSON object or array, or empty", nil))
	}

	// The call goes through the parser as a JSON-RPC request, so that the
	// limits on nesting apply to it exactly as to POST /rpc, and so that
	// the parser's check of the JSON is the only one. The params it finds
	// are a JSON value: when they are the body, byte for byte, the body is
	// one. A body that is not could still make the message valid JSON
	// (`{},"method":"other"`), which the comparison refuses.
	method, _ := json.Marshal(r.PathValue("method"))
	id, _ := json.Marshal(rid)
	msg := make([]byte, 0, len(params)+len(method)+len(id)+48)
	msg = append(msg, `{"jsonrpc":"2.0","id":`...)
	msg = append(append(msg, id...), `,"method":`...)
	msg = append(msg, method...)
	if params != nil {
		msg = append(append(msg, `,"params":`...), params...)
	}
	msg = append(msg, '}')
	elems, _, perr := s.parse(msg)
	if perr != nil && !json.Valid(params) || perr == nil && (len(elems) != 1 || !bytes.Equal(elems[0].req.Params, params)) {
		return s.restError(w, rid, 0, notJSON())
	}
	if perr != nil {
		return s.restError(w, rid, 0, perr)
	}
	p := s.plan(elems, hdr, nil)
	turn()
	defer p.done()
	s.stream(r.Context(), p.calls, p.charge, func(i int, resp schema.Response) { p.out[p.slots[i]].Response = resp })
	o := outcome{items: 1, calls: len(p.calls)}
	if len(p.out) != 1 {
		// Impossible: the message is one request with an id.
		return s.restError(w, rid, 0, internalError())
	}
	resp := p.out[0].Response
	if resp.Error != nil {
		eo := s.restError(w, rid, 0, resp.Error)
		eo.items, eo.calls = o.items, o.calls
		return eo
	}
	b := append([]byte(`{"success":true,"data":`), resp.Result...)
	b = append(append(b, `,"request_id":`...), id...)
	b = append(b, '}')
	o.status = http.StatusOK
	o.bytes = writeJSON(w, http.StatusOK, b)
	return o
}

// restError writes a failed REST call: status, or the status of the
// error's code when status is 0, with the error in the body.
func (s *Server) restError(w http.ResponseWriter, rid string, status int, e *schema.Error) outcome {
	if status == 0 {
		status = StatusOf(e)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if secs, ok := retryAfter(e); ok {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
		}
	}
	eb, err := json.Marshal(e)
	if err != nil {
		eb, _ = json.Marshal(internalError())
	}
	id, _ := json.Marshal(rid)
	b := append([]byte(`{"success":false,"error":`), eb...)
	b = append(append(b, `,"request_id":`...), id...)
	b = append(b, '}')
	return outcome{status: status, failed: 1, bytes: writeJSON(w, status, b), reason: e.Message}
}

// StatusOf returns the HTTP status with which the REST adapter answers a
// call that failed with e:
//
//	-32700 parse error, -32600 invalid request, -32602 invalid params   400
//	-32601 method not found, no worker serves it                        404
//	-32005 forbidden                                                    403
//	-32006 a limit was exceeded                                         413
//	-32002 overloaded (with Retry-After)                                429
//	-32004 canceled                                                     499
//	-32603 internal error, and any other code in -32768..-32000         500
//	-32003 unavailable (with Retry-After when data has retry_after_ms)  503
//	-32001 timed out                                                    504
//	-32000 tool error, and a tool's own codes                           422
//
// A tool that fails has been reached and has answered: toolbus worked, the
// request did not succeed. That is 422, not a 5xx, which HTTP clients and
// proxies take as a fault of the server and retry, or replace with a page
// of their own; whether to retry is the tool's to say, in data.retryable.
// 499, the status proxies use for a client that went away, marks calls
// canceled by their client, who is usually gone.
func StatusOf(e *schema.Error) int {
	switch e.Code {
	case schema.CodeParseError, schema.CodeInvalidRequest, schema.CodeInvalidParams:
		return http.StatusBadRequest
	case schema.CodeMethodNotFound, schema.CodeJobNotFound:
		return http.StatusNotFound
	case schema.CodeForbidden:
		return http.StatusForbidden
	case schema.CodeLimitExceeded:
		return http.StatusRequestEntityTooLarge
	case schema.CodeOverloaded:
		return http.StatusTooManyRequests
	case schema.CodeCanceled:
		return StatusClientClosedRequest
	case schema.CodeUnavailable:
		return http.StatusServiceUnavailable
	case schema.CodeTimeout:
		return http.StatusGatewayTimeout
	case schema.CodeToolError:
		return http.StatusUnprocessableEntity
	}
	if e.Code >= -32768 && e.Code <= -32000 {
		return http.StatusInternalServerError
	}
	return http.StatusUnprocessableEntity
}

// StatusClientClosedRequest is the status of a call canceled by its client.
const StatusClientClosedRequest = 499

// retryAfter reads data.retry_after_ms of an error as whole seconds,
// rounded up.
func retryAfter(e *schema.Error) (int, bool) {
	var d struct {
		RetryAfterMS *float64 `json:"retry_after_ms"`
	}
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil || d.RetryAfterMS == nil || *d.RetryAfterMS < 0 {
		return 0, false
	}
	return int(math.Ceil(*d.RetryAfterMS / 1000)), true
}

// requestID returns the client's request id when it is sane (1 to 128
// characters of A-Z a-z 0-9 and - _ . :), and a new random one otherwise.
func requestID(client string) string {
	if len(client) > 0 && len(client) <= maxRequestID {
		ok := true
		for i := 0; i < len(client) && ok; i++ {
			c := client[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
				c == '-' || c == '_' || c == '.' || c == ':'
		}
		if ok {
			return client
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
