// Package discovery knows which tools the cluster serves now. Workers
// announce each of their tools on a subject of its own (PROTOCOL.md
// section 9), so that NATS permissions decide which tools a worker may
// announce; a [Registry] follows those announcements through a [Feed] and
// keeps the live catalogue: each tool's descriptor in force, how many
// workers serve it, and the descriptors it could not use ([Problem]). A
// descriptor over the limits of an announcement is refused, and when
// workers disagree on a tool's descriptor the incumbent's stays in force,
// validated as ever. The registry also keeps the known tools: every tool
// advertised within a retention period, live or not, with its descriptor,
// in a JetStream bucket that every registry of the cluster shares
// ([ToolsBucket], [Registry.Persist]), so that a tool whose workers are
// scaled to zero, or that was announced to another ingress, or before a
// restart, is still known; a tool that was never served ([ServedAfter])
// is kept for much less.
//
// Descriptions are data: the registry hands them on as the descriptor's
// own member, and never writes them into text of its own.
//
// The ingress uses the registry in three places, all of which take what one
// caller may see as a [Scope] (a permission predicate the ingress builds
// from its authentication), so that discovery never knows how callers are
// authenticated:
//
//   - [Layer] is the discovery layer of the ingress's dispatcher chain: it
//     checks params against the advertised JSON Schemas, bounds deadlines
//     by the advertised timeouts, and answers -32003 for a known method no
//     worker serves now.
//   - [Discoverer] answers rpc.discover and GET /openrpc.json with the
//     OpenRPC document ([Registry.OpenRPC]) of the tools the caller may call.
//   - The MCP front door (package ingress/mcp) lists the live tools.
//
// The jobs service judges submits with [Registry.Check]: a method that is
// not known is refused, params that break its schema too, and a job of a
// known method no worker serves now is accepted and says it waits.
package discovery
