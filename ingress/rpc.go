package ingress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

// outcome is what the request line of the log says about one POST /rpc.
type outcome struct {
	status int
	items  int    // elements in the body
	calls  int    // calls handed to the dispatcher, notifications included
	failed int    // error responses written
	bytes  int    // response body size
	reason string // why the request was refused or went wrong, if it was
}

// serveRPC handles /rpc and logs one line for the request: a GET that asks
// for an upgrade becomes a WebSocket connection, which logs its own line.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	if isUpgrade(r) {
		s.serveWebSocket(w, r)
		return
	}
	start := time.Now()
	s.logRequest(r, "rpc", start, s.rpc(w, r))
}

// logRequest writes the request line of one HTTP request: at level Info
// with the access log on, Debug without, Error for a 5xx status.
func (s *Server) logRequest(r *http.Request, msg string, start time.Time, o outcome) {
	level := slog.LevelDebug
	if s.cfg.accessLog {
		level = slog.LevelInfo
	}
	if o.status >= 500 {
		level = slog.LevelError
	}
	if !s.log.Enabled(r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("http_method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", o.status),
		slog.Int("items", o.items),
		slog.Int("calls", o.calls),
		slog.Int("errors", o.failed),
		slog.Int("bytes", o.bytes),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("remote", r.RemoteAddr),
	}
	if o.reason != "" {
		attrs = append(attrs, slog.String("reason", o.reason))
	}
	s.log.LogAttrs(r.Context(), level, msg, attrs...)
}

// rpc answers one POST /rpc. The checks that need no body come first, so a
// request that is refused is never read.
func (s *Server) rpc(w http.ResponseWriter, r *http.Request) outcome {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return s.refuse(w, http.StatusMethodNotAllowed, schema.NewError(schema.CodeInvalidRequest,
			"invalid request: HTTP method must be POST",
			map[string]any{"http_method": r.Method, "allow": http.MethodPost}))
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		return s.refuse(w, http.StatusUnsupportedMediaType, schema.NewError(schema.CodeInvalidRequest,
			"invalid request: Content-Type must be application/json",
			map[string]any{"content_type": ct}))
	}
	hdr, terr := s.callHeaders(r)
	if terr != nil {
		return s.refuse(w, http.StatusBadRequest, terr)
	}
	body, err := readBody(w, r, s.cfg.limits.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			got := int64(-1)
			if r.ContentLength > tooBig.Limit {
				got = r.ContentLength
			}
			return s.refuse(w, http.StatusRequestEntityTooLarge,
				schema.LimitError("max_body_bytes", tooBig.Limit, got))
		}
		// The client most likely went away mid-body; answer in case it
		// is still listening.
		o := s.refuse(w, http.StatusBadRequest, schema.NewError(schema.CodeParseError,
			"parse error: reading body failed", nil))
		o.reason = "read body: " + err.Error()
		return o
	}

	sse := wantsEvents(r.Header)
	// A batch, or a body of 16 KiB or more, waits for its caller's turn
	// before it is parsed, and holds a seat while its calls are planned:
	// a large batch is its caller's work, done in its caller's share (see
	// [Server.awaitTurn]).
	hdr, endTurn, perr := s.awaitTurn(r.Context(), hdr, body)
	var elems []element
	var batch bool
	if perr == nil {
		elems, batch, perr = s.parse(body)
	}
	if perr != nil {
		endTurn()
		var o outcome
		if sse {
			o = s.writeEvents(r.Context(), w, &plan{out: []response{{Response: schema.Response{Error: perr}}}})
		} else {
			o = s.write(r.Context(), w, []response{{Response: schema.Response{Error: perr}}}, false)
		}
		o.reason = perr.Message
		return o
	}
	p := s.plan(elems, hdr, nil)
	endTurn()
	defer p.done()
	var o outcome
	if sse {
		o = s.writeEvents(r.Context(), w, &p)
	} else {
		s.dispatch(r.Context(), &p)
		o = s.write(r.Context(), w, p.out, batch)
	}
	o.items, o.calls = len(elems), len(p.calls)
	return o
}

// isJSON reports whether a Content-Type names JSON: application/json in any
// case, with any parameters, but no charset other than UTF-8, the only
// encoding JSON has.
func isJSON(contentType string) bool {
	if contentType == "application/json" {
		return true // the common case, without parsing
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8") || strings.EqualFold(cs, "utf8")
}

// parseTimeout reads the Toolbus-Timeout header: absent means no deadline
// of the client's own (zero); anything but a positive Go duration is an
// invalid request.
func parseTimeout(h http.Header) (time.Duration, *schema.Error) {
	v := h.Get(schema.HeaderTimeout)
	if v == "" {
		if _, present := h[schema.HeaderTimeout]; !present {
			return 0, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err == nil && d > 0 {
		return d, nil
	}
	return 0, schema.NewError(schema.CodeInvalidRequest,
		"invalid request: "+schema.HeaderTimeout+" header must be a positive duration such as 300ms",
		map[string]any{"header": schema.HeaderTimeout, "value": v})
}

// callHeaders is what a request's headers ask for every call it carries.
type callHeaders struct {
	timeout time.Duration   // Toolbus-Timeout; zero when absent
	async   bool            // Prefer: respond-async
	caller  *auth.Principal // who sent the calls; nil without WithAuth
	// trace is the caller's W3C trace context (traceparent), invalid
	// when it sent none; a call refused before dispatch is logged and
	// answered under it.
	trace trace.SpanContext
	// idemKey is the Idempotency-Key that names the calls (see
	// [schema.SetIdempotencyKey]); empty when absent and on a WebSocket.
	idemKey string
}

// callHeaders reads what r's headers ask for its calls, and who sent them:
// the caller the authentication middleware found, the trace context, and
// the idempotency key the idempotency middleware checked.
func (s *Server) callHeaders(r *http.Request) (callHeaders, *schema.Error) {
	hdr, err := parseCallHeaders(r.Header)
	hdr.caller, _ = r.Context().Value(callerKey{}).(*auth.Principal)
	hdr.trace = trace.SpanContextFromContext(r.Context())
	if !isUpgrade(r) {
		hdr.idemKey = r.Header.Get(schema.HeaderIdempotencyKey)
	}
	return hdr, err
}

// parseCallHeaders reads Toolbus-Timeout and Prefer.
func parseCallHeaders(h http.Header) (callHeaders, *schema.Error) {
	timeout, err := parseTimeout(h)
	return callHeaders{timeout: timeout, async: prefersAsync(h)}, err
}

// prefersAsync reports whether a Prefer header (RFC 7240) names
// respond-async.
func prefersAsync(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for _, pref := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(pref), ";")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// readBody reads the whole body, never more than max bytes. A body longer
// than max returns an *http.MaxBytesError, without reading it when its
// declared length already says so.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, &http.MaxBytesError{Limit: max}
	}
	body := http.MaxBytesReader(w, r.Body, max)
	if r.ContentLength < 0 {
		return io.ReadAll(body)
	}
	// The length is known and within the limit: read it in one buffer.
	b := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// bufPool holds response buffers; the body is written with one Write, after
// which the buffer is free again.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf keeps a rare huge answer from pinning memory in the pool.
const maxPooledBuf = 1 << 20

// write writes the answer: nothing to answer is 204, one request gets one
// object, a batch an array.
func (s *Server) write(ctx context.Context, w http.ResponseWriter, resps []response, batch bool) outcome {
	o := outcome{status: http.StatusOK}
	if len(resps) == 0 {
		o.status = http.StatusNoContent
		w.WriteHeader(http.StatusNoContent)
		return o
	}
	for _, r := range resps {
		if r.Error != nil {
			o.failed++
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBuf {
			bufPool.Put(bp)
		}
	}()
	var b []byte
	var err error
	b, err = appendResponses((*bp)[:0], resps, batch, s.yield)
	if err != nil {
		// Only an error message that cannot be marshalled gets here.
		s.log.LogAttrs(ctx, slog.LevelError, "encode response", slog.String("error", err.Error()))
		b, _ = schema.Response{Error: internalError()}.AppendJSON((*bp)[:0])
		o.reason = "encode response: " + err.Error()
	}
	*bp = b
	o.status = http.StatusOK
	o.bytes = writeJSON(w, http.StatusOK, b)
	return o
}

// refuse answers a request the ingress will not parse with an HTTP status
// and a JSON-RPC error body with a null id.
func (s *Server) refuse(w http.ResponseWriter, status int, e *schema.Error) outcome {
	// AppendJSON fails only on a message json cannot encode; the
	// ingress's own messages are plain strings.
	b, _ := schema.Response{Error: e}.AppendJSON(nil)
	return outcome{status: status, failed: 1, bytes: writeJSON(w, status, b), reason: e.Message}
}

// writeJSON writes body with one Write and returns how many bytes went out.
func writeJSON(w http.ResponseWriter, status int, body []byte) int {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	n, _ := w.Write(body)
	return n
}

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

// EventStream is the media type with which a client of POST /rpc asks for
// its answers as server-sent events.
const EventStream = "text/event-stream"

// wantsEvents reports whether a request's Accept header asks for server-sent
// events: it lists text/event-stream with a quality above zero and at least
// as high as that of application/json. Wildcards do not count: a client
// gets events only when it names them.
func wantsEvents(h http.Header) bool {
	accept := h.Values("Accept")
	if len(accept) == 0 {
		return false
	}
	events, json := -1.0, -1.0
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if qs, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(qs, 64); err != nil {
					continue
				}
			}
			switch mt {
			case EventStream:
				events = max(events, q)
			case "application/json":
				json = max(json, q)
			}
		}
	}
	return events > 0 && events >= json
}

// isUpgrade reports whether r asks to become a WebSocket connection.
func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
