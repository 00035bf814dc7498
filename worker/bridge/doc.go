// Package bridge serves the tools of a server of another protocol on a
// worker runtime, and keeps them in step with it. It is the kernel that
// [github.com/toolbus/toolbus/worker/mcpbridge] and
// [github.com/toolbus/toolbus/worker/a2abridge] share: those packages are
// adapters that only connect, list and call.
//
// A [Kernel] connects through its [Adapter], lists the [Tool]s the
// [Conn] offers and registers one method for each, named after the tool
// under an optional prefix and fitted to the method grammar. It then
// supervises the connection until [Kernel.Close]:
//
//   - When the connection ends ([Conn.Wait] returns), or a call or a
//     listing says the server is gone ([Lost]), calls are answered -32003
//     (unavailable, retryable) at once, and the kernel connects again,
//     waiting twice as long after each failure, from the least wait to
//     the most ([Config.MinBackoff], [Config.MaxBackoff]).
//   - It lists the tools again when asked ([Kernel.Relist], for a server
//     that says its list changed), every [Config.Relist] interval, and on
//     every new connection. A tool that is new is registered; a tool that
//     is gone is withdrawn: a runtime cannot forget a method, so its
//     method stays and is answered -32601 (tool_withdrawn) until the
//     server offers the tool again.
//
// A call of a method goes to the [Tool.Call] of the latest listing, under
// the call's context and deadline.
package bridge
