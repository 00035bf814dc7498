package bus

import "github.com/nats-io/nats.go"

// Origin names the toolbus cluster that nc and prefix reach, so that one
// part can tell whether something it sees came from its own cluster: the
// MCP front door marks the tools it lists with it, and the MCP bridge
// refuses the tools of its own cluster. It is the prefix and, after an
// "@", the NATS cluster's name, or the server's id when the server is not
// clustered (a single or embedded one, whose id is new at every start).
// Two deployments whose NATS clusters have the same name and that use the
// same prefix have the same origin. It is empty while nc is not connected.
func Origin(nc *nats.Conn, prefix string) string {
	if nc == nil || !nc.IsConnected() {
		return ""
	}
	id := nc.ConnectedClusterName()
	if id == "" {
		id = nc.ConnectedServerId()
	}
	if id == "" {
		return ""
	}
	return prefix + "@" + id
}
