package schema

// Class is who an error answer is about, for counting error rates apart:
// a tool that answered with a business error is working as designed, a
// caller that sent a bad request is the caller's problem, and only the
// rest is toolbus or its workers failing.
type Class int

// The classes of [Classify]. The zero value is ClassNone, a success.
const (
	ClassNone   Class = iota // no error
	ClassTool                // the tool's own codes and -32000
	ClassCaller              // the request: -32700, -32600, -32601, -32602, -32005, -32007
	ClassInfra               // toolbus or the worker: -32001 to -32004, -32006, -32603 and other reserved codes
)

// String names the class as status answers and the dashboard do.
func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassTool:
		return "tool"
	case ClassCaller:
		return "caller"
	case ClassInfra:
		return "infra"
	}
	return "unknown"
}

// Classify returns the class of an answer with error code; code 0 means
// no error. It is the one place that decides which errors count as tool,
// caller or infrastructure errors: the dashboard, status answers and
// anything else that reports error rates ask it.
//
// A code outside the range JSON-RPC reserves (-32768 to -32000) is the
// tool's own, and so is -32000. Among reserved codes, those about the
// request are the caller's; a reserved code toolbus does not define is
// counted as an infrastructure error, since no tool may use it.
func Classify(code int) Class {
	switch {
	case code == 0:
		return ClassNone
	case code == CodeToolError, code < -32768 || code > -32000:
		return ClassTool
	}
	switch code {
	case CodeParseError, CodeInvalidRequest, CodeMethodNotFound, CodeInvalidParams, CodeForbidden, CodeJobNotFound:
		return ClassCaller
	}
	return ClassInfra
}
