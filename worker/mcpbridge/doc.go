// Package mcpbridge puts an existing Model Context Protocol server behind
// toolbus: a [Bridge] connects to the server (a command it starts and
// speaks to over stdio, see [Command], or a Streamable HTTP endpoint, see
// [URL]), lists its tools, and registers each on a [worker.Runtime] as a
// toolbus method, with an optional prefix and its name fitted to the
// method grammar. The tool's input and output schemas become the method's
// descriptor, so discovery, validation at the ingress, rpc.discover and
// the MCP front door all see them.
//
// A call of such a method is forwarded as tools/call under the call's
// context and deadline. A tool result with isError is answered as a
// toolbus tool error (-32000) carrying the tool's text; a successful one
// answers the tool's structured content when it has some, else its text
// (one JSON string) when all its content is text, else the content array.
// Structured content that wraps a value that is not an object,
// {"result": value}, is unwrapped when the tool's output schema is
// exactly the wrapper's (the method's result schema is then the value's)
// or the result's _meta "toolbus/wrapped" says so, as toolbus's own MCP
// front door marks it: a toolbus cluster behind a bridge answers the
// values its tools answered.
//
// When the server goes away (the process dies, the endpoint stops
// answering) the bridge reconnects with bounded exponential backoff,
// starting the command again for stdio; calls meanwhile are answered
// -32003 (unavailable, retryable). When the server says its tools
// changed, they are listed again: new ones are served, and those it no
// longer offers are answered -32601 (tool_withdrawn). Several bridge
// replicas of one server, each with its own runtime, share the load like
// any workers.
//
// The supervising, the backoff and the keeping of the methods in step
// are the kernel's, [github.com/toolbus/toolbus/worker/bridge]; this
// package is its adapter to MCP, which connects, lists and calls.
package mcpbridge
