package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// TimeoutHeader is the request header in which a client asks for a deadline
// for every call of its request, as a Go duration such as "300ms". The
// aggregator shortens it to the method's and the server's maximum.
const TimeoutHeader = "Toolbus-Timeout"

// outcome is what the request line of the log says about one POST /rpc.
type outcome struct {
	status int
	items  int    // elements in the body
	calls  int    // calls handed to the dispatcher, notifications included
	failed int    // error responses written
	bytes  int    // response body size
	reason string // why the request was refused or went wrong, if it was
}

// serveRPC handles /rpc and logs one line for the request.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := s.rpc(w, r)
	level := slog.LevelInfo
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
		slog.Duration("duration", time.Since(start)),
		slog.String("remote", r.RemoteAddr),
	}
	if o.reason != "" {
		attrs = append(attrs, slog.String("reason", o.reason))
	}
	s.log.LogAttrs(r.Context(), level, "rpc", attrs...)
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
	timeout, terr := parseTimeout(r.Header)
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

	items, batch, perr := schema.Parse(body, s.limit)
	if perr != nil {
		o := s.write(r.Context(), w, []schema.Response{{Error: perr}}, false)
		o.reason = perr.Message
		return o
	}
	resps, calls := s.answer(r.Context(), items, timeout)
	o := s.write(r.Context(), w, resps, batch)
	o.items, o.calls = len(items), calls
	return o
}

// answer turns parsed items into the responses to write, in request order:
// elements the ingress answers itself get their error there, the others are
// dispatched together and their responses put in their places. It returns
// the number of calls dispatched.
func (s *Server) answer(ctx context.Context, items []schema.Item, timeout time.Duration) ([]schema.Response, int) {
	out := make([]schema.Response, 0, len(items))
	var calls []schema.Call
	var slots []int // per call, its index in out, or -1 for a notification
	for _, it := range items {
		if it.Err != nil {
			// An element whose id could not be read is answered with a
			// null id, as the specification asks.
			out = append(out, schema.Response{ID: it.Request.ID, Error: it.Err})
			continue
		}
		req := it.Request
		if e := checkMethod(req.Method); e != nil {
			if !req.IsNotification() {
				out = append(out, schema.Response{ID: req.ID, Error: e})
			}
			continue
		}
		slot := -1
		if !req.IsNotification() {
			slot = len(out)
			out = append(out, schema.Response{ID: req.ID})
		}
		if calls == nil {
			calls = make([]schema.Call, 0, len(items))
			slots = make([]int, 0, len(items))
		}
		calls = append(calls, schema.Call{Request: req, Timeout: timeout})
		slots = append(slots, slot)
	}
	if len(calls) == 0 {
		return out, 0
	}

	got, err := s.dispatch(ctx, calls)
	if err == nil && len(got) != len(calls) {
		err = fmt.Errorf("dispatcher returned %d responses for %d calls", len(got), len(calls))
	}
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "dispatch failed", slog.String("error", err.Error()))
		for _, slot := range slots {
			if slot >= 0 {
				out[slot].Error = internalError()
			}
		}
		return out, len(calls)
	}
	for i, slot := range slots {
		if slot < 0 {
			continue
		}
		r := got[i]
		switch {
		case r.Error != nil:
			// An error is never swallowed, even next to a result.
			out[slot].Error = r.Error
		case len(r.Result) > 0:
			out[slot].Result = r.Result
		default:
			s.log.LogAttrs(ctx, slog.LevelError, "dispatcher returned neither result nor error",
				slog.String("id", string(calls[i].ID)), slog.String("method", calls[i].Method))
			out[slot].Error = internalError()
		}
	}
	return out, len(calls)
}

// dispatch calls the dispatcher, turning a panic into an error so that every
// call of the request is still answered.
func (s *Server) dispatch(ctx context.Context, calls []schema.Call) (resps []schema.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.LogAttrs(ctx, slog.LevelError, "dispatcher panicked",
				slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("dispatcher panicked: %v", v)
		}
	}()
	return s.d.Dispatch(ctx, calls), nil
}

// internalError is the answer for a call that got no usable answer. The
// detail goes to the log; the client learns only that toolbus failed.
func internalError() *schema.Error {
	return schema.NewError(schema.CodeInternal, "internal error: the call got no answer",
		map[string]any{"reason": "no_answer"})
}

// checkMethod returns the error for a method the ingress never dispatches:
// a name outside the bus grammar, or a reserved rpc.* name. The ingress
// serves no rpc.* method yet.
func checkMethod(method string) *schema.Error {
	if err := schema.ValidateMethod(method); err != nil {
		return schema.ErrorFrom(err)
	}
	if schema.IsReserved(method) {
		return schema.NewError(schema.CodeMethodNotFound, "method not found: "+method+" is reserved",
			map[string]any{"reason": "reserved", "method": method})
	}
	return nil
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
	v := h.Get(TimeoutHeader)
	if v == "" {
		if _, present := h[TimeoutHeader]; !present {
			return 0, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err == nil && d > 0 {
		return d, nil
	}
	return 0, schema.NewError(schema.CodeInvalidRequest,
		"invalid request: "+TimeoutHeader+" header must be a positive duration such as 300ms",
		map[string]any{"header": TimeoutHeader, "value": v})
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
func (s *Server) write(ctx context.Context, w http.ResponseWriter, resps []schema.Response, batch bool) outcome {
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
	if batch {
		b, err = schema.AppendBatch((*bp)[:0], resps)
	} else {
		b, err = resps[0].AppendJSON((*bp)[:0])
	}
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
