package schema

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Version is the value of the "jsonrpc" member of every request and response.
const Version = "2.0"

// Request is one JSON-RPC 2.0 request or notification.
//
// ID holds the id exactly as the client wrote it: nil when the member was
// absent (a notification) and the bytes `null` when the id was null, which is
// a request, not a notification. Params is nil when absent. Both are JSON
// that the door the request came in by checked ([Parse] for JSON-RPC): what
// handles a request after that does not check them again.
type Request struct {
	ID     json.RawMessage
	Method string
	Params json.RawMessage
}

// IsNotification reports whether the request carries no id and so is never
// answered.
func (r *Request) IsNotification() bool { return r.ID == nil }

// Call is a request together with what the transport asked for it: the
// aggregator dispatches calls.
type Call struct {
	Request
	// Timeout is the deadline the client asked for (Toolbus-Timeout); zero
	// means none. The aggregator shortens it to the method's and the
	// server's maximum.
	Timeout time.Duration
	// Caller identifies who sent the call; empty when unauthenticated.
	Caller string
	// Async reports that the client prefers (Prefer: respond-async) that a
	// call of a job-capable tool which misses its deadline go on as a job,
	// answered with the job's id, rather than be abandoned.
	Async bool
	// TraceParent is the W3C traceparent of the call's span, sent to the
	// worker in the traceparent header; empty when the call is not traced.
	TraceParent string
	// IdempotencyKey names the call for the dispatcher's idempotency
	// records (see [SetIdempotencyKey]); empty when the client sent no
	// key. Two calls of one caller with the same key are one call.
	IdempotencyKey string
	// Progress, when not nil, receives the progress reports the worker
	// sends while the call runs ([ProgressReport]), newest first: a report
	// not yet handed over is replaced by a newer one. The aggregator calls
	// it from the callback that receives the report, one report at a time
	// and never after the answer; it must return at once and never block
	// (every call's replies wait behind it). Nil: reports are ignored.
	Progress func(percent float64, message string)
	// Ask, when not nil, says that whoever made the call can answer a
	// question its tool asks while it runs (rule 11 of PROTOCOL.md): a
	// job's runner sets it. The aggregator then puts a fresh
	// [HeaderAskKey] on the call message, only when heartbeats are on
	// (without them the call cannot be asked, and Ask is never called).
	// It receives each question the worker asks, checked with
	// [Question.Validate] and its answer subject with
	// [CheckAnswerSubject] (a question that fails is answered
	// [AskCancel] by the aggregator itself and not handed over), and the
	// same question again whenever the worker repeats it; answer seals an
	// [Answer] with the call's key and publishes it on the question's
	// answer subject, and may be called from any goroutine, as often as
	// needed (a repeated question is answered again the same way), until
	// the call is answered. As with Progress, the aggregator calls Ask
	// from the callback that receives the question, never after the
	// answer; it must return at once and never block, and so must not
	// call answer itself. Nil: the call cannot be asked, and its worker's
	// tool fails at once if it asks ([ReasonCannotAsk]).
	Ask func(q Question, answer func(Answer) error)
}

// Item is one element of a parsed message: either a valid request, or the
// error that element must be answered with (Err non-nil; Request.ID then holds
// the id when one could be read, otherwise nil and the answer's id is null).
type Item struct {
	Request Request
	Err     *Error
}

// Limits bounds what [Parse] accepts. A zero field means no limit.
type Limits struct {
	// MaxBatchItems is the most elements a batch may have.
	MaxBatchItems int
	// MaxDepth is the deepest nesting of arrays and objects in the body,
	// counting the batch array itself.
	MaxDepth int
}

// Parse parses a JSON-RPC 2.0 body: a single request, a notification or a
// batch. batch reports whether the body was an array, in which case the
// answer must be an array too (unless every element is a notification).
//
// A body that cannot be answered element by element returns a non-nil
// *Error, to be sent alone with a null id: invalid JSON ([CodeParseError]), an
// empty batch or a body that is neither object nor array
// ([CodeInvalidRequest]), too deep or too large a batch ([CodeLimitExceeded]).
// Otherwise each element becomes an [Item], invalid ones carrying their own
// error, in the order they came.
//
// The items never alias body: the caller may reuse it once Parse returns.
func Parse(body []byte, lim Limits) (items []Item, batch bool, err *Error) {
	return ParseSteps(body, lim, nil)
}

// StepElements is how many elements of a batch [ParseSteps] reads
// between two calls of its step.
const StepElements = 32

// ParseSteps is [Parse] in bounded steps: when step is not nil, it is
// called after every [StepElements] elements of a batch, in each of the
// two passes (the check of the body's JSON, and the decoding of its
// elements), so that a server parsing a large batch can let other work
// run between steps. A single request is one step, and the check takes
// no more steps than a batch of lim.MaxBatchItems elements would, however
// many elements a body past that limit has.
func ParseSteps(body []byte, lim Limits, step func()) (items []Item, batch bool, err *Error) {
	first, ok := firstByte(body)
	if !ok {
		return nil, false, NewError(CodeParseError, "parse error: empty body", nil)
	}
	// One pass checks the JSON, its nesting and its UTF-8: this is the
	// one place where a call's params are checked, and nothing after it
	// (the aggregator, the worker) reads them again to check them.
	scanStep := step
	if step != nil && first == '[' && lim.MaxBatchItems > 0 {
		// Past the batch limit the body is refused once checked: its
		// check is no work of a batch to be shared in steps.
		steps := 0
		scanStep = func() {
			if steps++; steps*StepElements <= lim.MaxBatchItems {
				step()
			}
		}
	}
	verdict, n := scanJSON(body, lim.MaxDepth, scanStep)
	switch verdict {
	case scanTooDeep:
		return nil, false, LimitError("max_depth", int64(lim.MaxDepth), -1)
	case scanSyntax:
		// A body that is nested too deeply is answered so even when it
		// is not JSON either, wherever the two problems lie.
		if err := CheckDepth(body, lim.MaxDepth); err != nil {
			return nil, false, err
		}
		return nil, false, NewError(CodeParseError, "parse error: invalid JSON", parseErrorData(body))
	case scanUTF8:
		// JSON text is UTF-8 (RFC 8259); bytes that are not would come
		// back in ids, params and results that no client could read.
		return nil, false, NewError(CodeParseError, "parse error: the body is not valid UTF-8", nil)
	}
	// From here on body is known to be one valid JSON value, so the
	// scanning below needs no error paths.
	switch first {
	case '{':
		body = bytes.Clone(body)
		return []Item{parseItem(bytes.TrimRight(body[skipSpace(body, 0):], " \t\r\n"))}, false, nil
	case '[':
	default:
		return nil, false, NewError(CodeInvalidRequest, "invalid request: body must be an object or an array", nil)
	}
	// The scan counted the elements, so the batch limit is checked before
	// any item is decoded, and items is sized exactly.
	if n == 0 {
		return nil, true, NewError(CodeInvalidRequest, "invalid request: empty batch", nil)
	}
	if lim.MaxBatchItems > 0 && n > lim.MaxBatchItems {
		return nil, true, LimitError("max_batch_items", int64(lim.MaxBatchItems), int64(n))
	}
	// One copy of the body backs every id and params of the batch.
	body = bytes.Clone(body)
	items = make([]Item, 0, n)
	forEachElement(body, func(raw []byte) {
		items = append(items, parseItem(raw))
		if step != nil && len(items)%StepElements == 0 && len(items) < n {
			step()
		}
	})
	return items, true, nil
}

func parseErrorData(body []byte) any {
	var v any
	err := json.Unmarshal(body, &v)
	if se, ok := err.(*json.SyntaxError); ok {
		return map[string]any{"offset": se.Offset}
	}
	return nil
}

func firstByte(b []byte) (byte, bool) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return 0, false
	}
	return b[i], true
}

// CheckDepth returns the error a body nested deeper than max arrays and
// objects is answered with ([CodeLimitExceeded], limit max_depth), or nil
// when it is not; max <= 0 means no limit. It is the depth check of
// [Parse], for front doors that hand a body to another protocol's
// decoder: it reads body once, stops as soon as the limit is passed, and
// does not validate the JSON.
func CheckDepth(body []byte, max int) *Error {
	if max > 0 && depth(body, max) > max {
		return LimitError("max_depth", int64(max), -1)
	}
	return nil
}

// depth returns the nesting depth of arrays and objects in b, stopping early
// once it passes stop. It does not validate b.
func depth(b []byte, stop int) int {
	d, max := 0, 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			d++
			if d > max {
				max = d
				if max > stop {
					return max
				}
			}
		case ']', '}':
			d--
		}
	}
	return max
}

// scanVerdict is what [scanJSON] finds in a body.
type scanVerdict uint8

const (
	// scanOK: one JSON value (RFC 8259) in UTF-8, nested no deeper than
	// the limit.
	scanOK scanVerdict = iota
	// scanSyntax: not one JSON value, as [json.Valid] judges it.
	scanSyntax
	// scanTooDeep: the arrays and objects nest deeper than the limit,
	// found before any syntax error.
	scanTooDeep
	// scanUTF8: one JSON value, but a string in it holds bytes that are
	// not UTF-8, which [json.Valid] accepts.
	scanUTF8
)

// scanJSON checks in one pass that b is one JSON value, with optional
// whitespace around it, that its strings are UTF-8, and that its arrays
// and objects nest at most max deep (max <= 0: no limit). Its verdict on
// the syntax is that of [json.Valid], on the encoding that of
// [utf8.Valid]; it reads each byte once and allocates only for nesting
// past 256 levels. elems counts the elements of the array b holds (0 for
// another value), as far as the scan went.
func scanJSON(b []byte, max int, step func()) (v scanVerdict, elems int) {
	// open holds one bit per open array or object, 1 for an object.
	var small [4]uint64
	open := small[:]
	depth := 0
	badUTF8 := false
	i := skipSpace(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return scanSyntax, elems
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			depth++
			if max > 0 && depth > max {
				return scanTooDeep, elems
			}
			if depth > len(open)*64 {
				open = append(open, 0)
			}
			word, bit := (depth-1)/64, uint64(1)<<((depth-1)%64)
			if c == '{' {
				open[word] |= bit
			} else {
				open[word] &^= bit
			}
			i = skipSpace(b, i+1)
			if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
				depth--
				i++
				break
			}
			if c == '{' {
				var ok bool
				if i, ok = scanMemberName(b, i, &badUTF8); !ok {
					return scanSyntax, elems
				}
			}
			continue
		case c == '"':
			var ok bool
			if i, ok = scanString(b, i, &badUTF8); !ok {
				return scanSyntax, elems
			}
		case c == '-' || '0' <= c && c <= '9':
			var ok bool
			if i, ok = scanNumber(b, i); !ok {
				return scanSyntax, elems
			}
		case c == 't' && bytes.HasPrefix(b[i:], []byte("true")):
			i += len("true")
		case c == 'f' && bytes.HasPrefix(b[i:], []byte("false")):
			i += len("false")
		case c == 'n' && bytes.HasPrefix(b[i:], []byte("null")):
			i += len("null")
		default:
			return scanSyntax, elems
		}
		// A value ends before b[i]: close what it ends, up to the next
		// value of an array or object. Each turn of this loop ends one
		// value, inside the array or object open at depth.
		for {
			i = skipSpace(b, i)
			if depth == 0 {
				switch {
				case i < len(b):
					return scanSyntax, elems
				case badUTF8:
					return scanUTF8, elems
				}
				return scanOK, elems
			}
			if i >= len(b) {
				return scanSyntax, elems
			}
			inObject := open[(depth-1)/64]&(uint64(1)<<((depth-1)%64)) != 0
			if depth == 1 && !inObject {
				elems++
				if step != nil && elems%StepElements == 0 {
					step()
				}
			}
			if b[i] == ',' {
				i = skipSpace(b, i+1)
				if inObject {
					var ok bool
					if i, ok = scanMemberName(b, i, &badUTF8); !ok {
						return scanSyntax, elems
					}
				}
				break
			}
			if inObject && b[i] != '}' || !inObject && b[i] != ']' {
				return scanSyntax, elems
			}
			depth--
			i++
		}
	}
}

// validJSON reports whether b is one JSON value, as [json.Valid] does:
// bytes that are not UTF-8 inside a string pass, as they do there.
func validJSON(b []byte) bool {
	v, _ := scanJSON(b, 0, nil)
	return v == scanOK || v == scanUTF8
}

// scanMemberName checks the name of an object member and its colon,
// starting at b[i], and returns the index of the member's value.
func scanMemberName(b []byte, i int, badUTF8 *bool) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := scanString(b, i, badUTF8)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

// scanString checks the string that starts at b[i] and returns the index
// just past it. Bytes that are not UTF-8 set *badUTF8 and do not end the
// scan, since the syntax is judged first.
func scanString(b []byte, i int, badUTF8 *bool) (int, bool) {
	for i++; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return i, false
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return i, false
					}
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				*badUTF8 = true
			}
			i += size
		}
	}
	return i, false
}

// scanNumber checks the number that starts at b[i] and returns the index
// just past it: an optional minus, an integer without leading zeros, an
// optional fraction and an optional exponent.
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

// skipDigits returns the index of the first byte at or after i that is
// not a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// The scanning functions below walk JSON that [scanJSON] has accepted, so
// they trust its shape and never fail; on other input they stay in bounds
// but their results mean nothing.

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		d := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				d++
			case '}', ']':
				d--
				if d == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', ']', '}', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// forEachElement calls fn with each element of the array that b holds.
func forEachElement(b []byte, fn func(raw []byte)) {
	i := skipSpace(b, skipSpace(b, 0)+1)
	for i < len(b) && b[i] != ']' {
		end := skipValue(b, i)
		fn(b[i:end])
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// forEachMember calls fn with each member of the object that b holds; name
// is the member name as JSON decodes it.
func forEachMember(b []byte, fn func(name, value []byte)) {
	i := skipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		end := skipString(b, i)
		name := b[i:end]
		if !isPlain(name) {
			name = []byte(unquote(name))
		} else {
			name = name[1 : len(name)-1]
		}
		i = skipSpace(b, end)
		i = skipSpace(b, i+1) // past ':'
		end = skipValue(b, i)
		fn(name, b[i:end])
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// isPlain reports whether the string literal lit holds only ASCII and no
// escapes, so that its bytes between the quotes are its value.
func isPlain(lit []byte) bool {
	if len(lit) < 2 {
		return false
	}
	for _, c := range lit[1 : len(lit)-1] {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// unquote decodes a JSON string literal.
func unquote(lit []byte) string {
	if isPlain(lit) {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s)
	return s
}

// parseItem validates one element of a message. Member names are matched
// exactly, as the specification says they are case-sensitive; a name
// written with escapes ("\u0069d") is the name it decodes to, and a repeated
// member counts once, with its last value.
func parseItem(raw []byte) Item {
	if raw[0] != '{' {
		return Item{Err: NewError(CodeInvalidRequest, "invalid request: not an object", nil)}
	}
	var id, version, method, params []byte
	forEachMember(raw, func(name, value []byte) {
		switch string(name) {
		case "id":
			id = value
		case "jsonrpc":
			version = value
		case "method":
			method = value
		case "params":
			params = value
		}
	})
	var it Item
	if id != nil {
		switch id[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			it.Request.ID = id
		default:
			it.Err = NewError(CodeInvalidRequest, "invalid request: id must be a string, a number or null", nil)
			return it
		}
	}
	switch {
	case version == nil:
		// Most likely a JSON-RPC 1.0 client: say what is missing and that
		// an operator can serve 1.0.
		it.Err = NewError(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0", and this request has none, `+
			`as a JSON-RPC 1.0 request would; the ingress serves 1.0 only when started with --jsonrpc1`, nil)
		return it
	case string(version) != `"2.0"`:
		it.Err = NewError(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`, nil)
		return it
	}
	if method == nil || method[0] != '"' {
		it.Err = NewError(CodeInvalidRequest, `invalid request: "method" must be a string`, nil)
		return it
	}
	it.Request.Method = unquote(method)
	if params != nil {
		if params[0] != '{' && params[0] != '[' {
			it.Err = NewError(CodeInvalidRequest, `invalid request: "params" must be an object or an array`, nil)
			return it
		}
		it.Request.Params = params
	}
	return it
}

// Response is one JSON-RPC 2.0 response: exactly one of Result and Error is
// set. A nil ID is written as null.
type Response struct {
	ID     json.RawMessage
	Result json.RawMessage
	Error  *Error
}

var nullJSON = []byte("null")

// MarshalJSON writes the response with "jsonrpc":"2.0", the id as it came,
// and either "result" or "error". A response with neither carries a null
// result.
func (r Response) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(nil)
}

// AppendJSON appends the JSON form of r to b.
func (r Response) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"jsonrpc":"2.0",`...)
	if r.Error != nil {
		b = append(b, `"error":{"code":`...)
		b = strconv.AppendInt(b, int64(r.Error.Code), 10)
		b = append(b, `,"message":`...)
		msg, err := json.Marshal(r.Error.Message)
		if err != nil {
			return nil, err
		}
		b = append(b, msg...)
		if len(r.Error.Data) > 0 {
			b = append(b, `,"data":`...)
			b = append(b, r.Error.Data...)
		}
		b = append(b, '}')
	} else {
		b = append(b, `"result":`...)
		if len(r.Result) == 0 {
			b = append(b, nullJSON...)
		} else {
			b = append(b, r.Result...)
		}
	}
	b = append(b, `,"id":`...)
	if len(r.ID) == 0 {
		b = append(b, nullJSON...)
	} else {
		b = append(b, r.ID...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads a response as a client receives it. The id, result and
// error data are kept as raw JSON.
func (r *Response) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	*r = Response{ID: members["id"], Result: members["result"]}
	if e, ok := members["error"]; ok && !bytes.Equal(e, nullJSON) {
		r.Error = new(Error)
		if err := json.Unmarshal(e, r.Error); err != nil {
			return err
		}
	}
	return nil
}

// AppendBatch appends the JSON array of responses to b.
func AppendBatch(b []byte, rs []Response) ([]byte, error) {
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = r.AppendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// MaxMethodBytes is the longest method name the bus accepts.
const MaxMethodBytes = 200

// ReservedPrefix starts the method names that the ingress answers itself;
// JSON-RPC reserves them for extensions and they are never routed to workers.
const ReservedPrefix = "rpc."

// ValidateMethod checks a method name against the grammar of the bus: tokens
// separated by '.', each token made of A-Z a-z 0-9 _ - / :, no empty token, at
// most [MaxMethodBytes] bytes. A name that passes can never be a NATS wildcard
// nor reach a subject outside the prefix. The error is a [CodeMethodNotFound]
// [*Error] whose data says what is wrong.
func ValidateMethod(method string) error {
	reason := methodProblem(method)
	if reason == "" {
		return nil
	}
	return NewError(CodeMethodNotFound, "method not found: invalid method name: "+reason,
		map[string]any{"reason": ReasonInvalidMethodName, "detail": reason})
}

func methodProblem(m string) string {
	if m == "" {
		return "empty"
	}
	if len(m) > MaxMethodBytes {
		return "longer than 200 bytes"
	}
	tokenLen := 0
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case c == '.':
			if tokenLen == 0 {
				return "empty token"
			}
			tokenLen = 0
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '-', c == '/', c == ':':
		default:
			return "character not allowed: " + quoteByte(c)
		}
		tokenLen++
	}
	if tokenLen == 0 {
		return "empty token"
	}
	return ""
}

func quoteByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		const hex = "0123456789abcdef"
		return "0x" + string([]byte{hex[c>>4], hex[c&0xf]})
	}
	return "'" + string(c) + "'"
}

// CheckCallable reports why a call of method cannot go to a tool: a name
// outside the method grammar ([ValidateMethod]'s error), or one reserved
// for the ingress (rpc.*). Both are [CodeMethodNotFound] [*Error]s; nil
// when a worker may serve it.
func CheckCallable(method string) error {
	if err := ValidateMethod(method); err != nil {
		return err
	}
	if IsReserved(method) {
		return NewError(CodeMethodNotFound, "method not found: "+method+" is reserved for the ingress",
			map[string]any{"reason": ReasonReserved})
	}
	return nil
}

// IsReserved reports whether method is one of the ingress's own (rpc.*).
func IsReserved(method string) bool {
	return strings.HasPrefix(method, ReservedPrefix)
}

// FitMethodName returns the method that serves a tool named name in
// another protocol (an MCP tool, an A2A skill) under prefix (none when
// empty): every byte outside the method grammar becomes '_', and empty
// tokens (leading, trailing or doubled dots) are dropped. It reports false
// when nothing usable is left, when the name would be one of the
// ingress's rpc.* names, or when it is too long.
func FitMethodName(prefix, name string) (string, bool) {
	var tokens []string
	if prefix != "" {
		tokens = append(tokens, prefix)
	}
	for _, t := range strings.Split(name, ".") {
		if t == "" {
			continue
		}
		tokens = append(tokens, strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
				r == '_', r == '-', r == '/', r == ':':
				return r
			}
			return '_'
		}, t))
	}
	method := strings.Join(tokens, ".")
	if ValidateMethod(method) != nil || IsReserved(method) {
		return "", false
	}
	return method, true
}
