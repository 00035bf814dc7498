package a2a

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// serveRPC answers one POST of A2A's JSON-RPC binding. The JSON-RPC
// envelope is checked by [schema.Parse], as POST /rpc checks it, so that
// both doors agree on it; then the params of the method (params.go).
// Only a request that passes both reaches the SDK's handler, rebuilt from
// what Parse read with an id of the front door's own, which the answer
// swaps back for the client's id byte for byte: the SDK reads a numeric
// id as a float64, which would lose digits.
//
// A batch is answered element by element: each request -32600 (A2A's
// methods block and stream, so /a2a takes one request per POST), an
// invalid element with its own error, a notification not at all. A
// notification alone runs as the request would, its answer dropped, and
// is answered HTTP 204 once it has run; one whose envelope is invalid is
// answered with the error, as JSON-RPC wants.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var tooLong *http.MaxBytesError
	switch {
	case errors.As(err, &tooLong):
		writeAnswer(w, refusal(nil, schema.LimitError("max_body_bytes", s.maxBody, -1)))
		return
	case err != nil:
		writeAnswer(w, refusal(nil, schema.NewError(schema.CodeParseError, "parse error: the request body could not be read; send it again", nil)))
		return
	}
	// The SDK decodes the whole body before anything of toolbus sees it,
	// so every check of the body happens here, the depth limit first.
	items, batch, perr := schema.Parse(body, schema.Limits{MaxDepth: s.maxDepth})
	switch {
	case perr != nil:
		writeAnswer(w, refusal(nil, perr))
		return
	case batch:
		refuseBatch(w, items)
		return
	case items[0].Err != nil:
		writeAnswer(w, refusal(items[0].Request.ID, items[0].Err))
		return
	}
	req := items[0].Request
	fromIngress, herr := s.ing.Request(withoutIdempotencyKey(r))
	if herr != nil {
		herr = schema.NewError(schema.CodeInvalidRequest, herr.Message, herr.Data)
	} else if pe := checkParams(req.Method, req.Params); pe != nil {
		herr = pe.error(req.Method)
	}
	if herr != nil {
		if req.IsNotification() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeAnswer(w, refusal(req.ID, herr))
		return
	}
	hdr := request{Request: fromIngress, endpoint: endpoint(r), field: new(string)}
	if req.Method == methodSend || req.Method == methodStream {
		var p struct {
			Message json.RawMessage `json:"message"`
		}
		_ = json.Unmarshal(req.Params, &p) // checkParams found an object
		hdr.message, hdr.parts = p.Message, rawParts(p.Message)
	}
	token := newIDToken()
	sdk := r.Clone(context.WithValue(r.Context(), requestKey{}, hdr))
	sdk.Body = io.NopCloser(bytes.NewReader(sdkBody(req, token)))
	switch {
	case req.IsNotification():
		s.rpc.ServeHTTP(discardWriter{}, sdk)
		w.WriteHeader(http.StatusNoContent)
	case req.Method == methodStream || req.Method == methodResubscribe:
		s.rpc.ServeHTTP(&streamWriter{ResponseWriter: w, token: idMember(strconv.Quote(token)), id: idMember(string(req.ID))}, sdk)
	default:
		var out bufferWriter
		s.rpc.ServeHTTP(&out, sdk)
		writeAnswer(w, withField(sdkAnswer(req.ID, out.buf.Bytes()), *hdr.field))
	}
}

// withoutIdempotencyKey returns r for the ingress to read, without its
// Idempotency-Key. A task outlives the request that made it: no key of
// the HTTP request names the calls the front door makes for it.
func withoutIdempotencyKey(r *http.Request) *http.Request {
	if r.Header.Get(schema.HeaderIdempotencyKey) == "" {
		return r
	}
	q := r.WithContext(r.Context())
	q.Header = r.Header.Clone()
	q.Header.Del(schema.HeaderIdempotencyKey)
	return q
}

// error returns the -32602 answer of params that do not fit method,
// naming the member in data.field.
func (e *paramsError) error(method string) *schema.Error {
	what := "the params of " + method
	if e.Field != "" {
		what = e.Field + " in the params of " + method
	}
	return schema.NewError(schema.CodeInvalidParams, fmt.Sprintf("invalid params: %s %s, as A2A 0.3 defines them", what, e.Reason),
		map[string]any{"field": e.Field})
}

// refuseBatch answers the elements of a batch: an invalid one with its
// error, a request with -32600, a notification not at all; a batch of
// notifications alone is answered HTTP 204.
func refuseBatch(w http.ResponseWriter, items []schema.Item) {
	var out []schema.Response
	for _, it := range items {
		switch {
		case it.Err != nil:
			out = append(out, refusal(it.Request.ID, it.Err))
		case !it.Request.IsNotification():
			out = append(out, refusal(it.Request.ID, schema.NewError(schema.CodeInvalidRequest,
				"invalid request: /a2a takes one request per POST, not a batch, since A2A's methods block and stream; send this request alone", nil)))
		}
	}
	if len(out) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	b, err := schema.AppendBatch(nil, out)
	if err != nil {
		writeAnswer(w, refusal(nil, schema.NewError(schema.CodeInternal, "internal error: encode the answer of a batch", nil)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// refusal is the answer to request id (nil: null) that the front door
// gives itself, in the form the SDK gives its own: the A2A code of e
// ([a2aError]) with A2A's message for it, and in data.error e's message
// (with toolbus's code when A2A's differs) beside the members of e's
// data.
func refusal(id json.RawMessage, e *schema.Error) schema.Response {
	err := a2aError(e)
	code, msg := a2aCode(err)
	text := err.Error()
	if code == e.Code {
		text = e.Message // no toolbus code to tell apart
	}
	data := map[string]any{}
	_ = json.Unmarshal(e.Data, &data)
	data["error"] = text
	return schema.Response{ID: id, Error: schema.NewError(code, msg, data)}
}

// a2aCodes are the codes of A2A's errors, as its JSON-RPC binding
// numbers them.
var a2aCodes = []struct {
	code int
	err  error
}{
	{-32700, a2a.ErrParseError},
	{-32600, a2a.ErrInvalidRequest},
	{-32601, a2a.ErrMethodNotFound},
	{-32602, a2a.ErrInvalidParams},
	{-32603, a2a.ErrInternalError},
	{-32000, a2a.ErrServerError},
	{-32001, a2a.ErrTaskNotFound},
	{-32002, a2a.ErrTaskNotCancelable},
	{-32003, a2a.ErrPushNotificationNotSupported},
	{-32004, a2a.ErrUnsupportedOperation},
	{-32005, a2a.ErrUnsupportedContentType},
	{-32006, a2a.ErrInvalidAgentResponse},
	{-32007, a2a.ErrAuthenticatedExtendedCardNotConfigured},
}

// a2aCode returns the code and message of the A2A error err wraps, or
// those of an internal error.
func a2aCode(err error) (int, string) {
	for _, c := range a2aCodes {
		if errors.Is(err, c.err) {
			return c.code, c.err.Error()
		}
	}
	return -32603, a2a.ErrInternalError.Error()
}

// writeAnswer writes one JSON-RPC answer: HTTP 200, application/json.
func writeAnswer(w http.ResponseWriter, resp schema.Response) {
	b, err := resp.AppendJSON(nil)
	if err != nil {
		b, _ = refusal(resp.ID, schema.NewError(schema.CodeInternal, "internal error: encode the answer", nil)).AppendJSON(nil)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// sdkAnswer returns the answer to request id that the SDK wrote as out.
// The SDK writes nothing for a call whose result is empty (deleting a
// push notification config); JSON-RPC wants an answer, and A2A's is a
// null result. The SDK calls params it cannot decode a parse error;
// since the body was JSON, they are params that do not fit the method.
func sdkAnswer(id json.RawMessage, out []byte) schema.Response {
	if len(bytes.TrimSpace(out)) == 0 {
		return schema.Response{ID: id}
	}
	var resp schema.Response
	if err := json.Unmarshal(out, &resp); err != nil {
		return refusal(id, schema.NewError(schema.CodeInternal, "internal error: the A2A handler wrote an answer toolbus cannot read", nil))
	}
	resp.ID = id
	if resp.Error != nil && resp.Error.Code == schema.CodeParseError {
		resp.Error.Code, resp.Error.Message = schema.CodeInvalidParams, a2a.ErrInvalidParams.Error()
	}
	return resp
}

// withField adds data.field to resp's -32602 error when the handler
// named the member it is about.
func withField(resp schema.Response, field string) schema.Response {
	if field == "" || resp.Error == nil || resp.Error.Code != schema.CodeInvalidParams {
		return resp
	}
	data := map[string]any{}
	_ = json.Unmarshal(resp.Error.Data, &data)
	data["field"] = field
	if b, err := json.Marshal(data); err == nil {
		resp.Error.Data = b
	}
	return resp
}

// sdkBody returns the request the SDK's handler reads: req with the id
// token in place of the client's (none for a notification).
func sdkBody(req schema.Request, token string) []byte {
	b := []byte(`{"jsonrpc":"2.0"`)
	if !req.IsNotification() {
		b = append(append(b, `,"id":`...), strconv.Quote(token)...)
	}
	method, _ := json.Marshal(req.Method)
	b = append(append(b, `,"method":`...), method...)
	if len(req.Params) > 0 {
		b = append(append(b, `,"params":`...), req.Params...)
	}
	return append(b, '}')
}

// newIDToken returns an id no client can guess, to stand for the
// client's id in what the SDK writes.
func newIDToken() string {
	var b [16]byte
	rand.Read(b[:])
	return "toolbus-a2a-" + hex.EncodeToString(b[:])
}

// idMember is the "id" member of an answer as encoding/json writes it.
func idMember(value string) []byte { return []byte(`"id":` + value) }

// bufferWriter keeps what the SDK writes of an answer that does not
// stream, so that it can be read before the client gets it.
type bufferWriter struct {
	header http.Header
	buf    bytes.Buffer
}

func (b *bufferWriter) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

func (b *bufferWriter) Write(p []byte) (int, error) { return b.buf.Write(p) }
func (b *bufferWriter) WriteHeader(int)             {}

// discardWriter drops the answer to a notification; it flushes, so that
// the notification of a method that streams runs as the request would.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}
func (discardWriter) Flush()                      {}

// streamWriter passes the events of a stream on with the client's id in
// place of the token. The SDK writes each event with one Write, so a
// token is never split between two.
type streamWriter struct {
	http.ResponseWriter
	token, id []byte
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if _, err := w.ResponseWriter.Write(bytes.ReplaceAll(p, w.token, w.id)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *streamWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
