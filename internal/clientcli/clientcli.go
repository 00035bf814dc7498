// Package clientcli holds the client commands of the toolbus command
// line: call, jobs, tools, health and a2a send, which talk to a running
// ingress (or any A2A agent) as a user's program would, through the
// client package and the protocols' own SDKs; api-key, which makes a
// caller's key and adds its digest to an --auth-file; and [Status],
// which asks the cluster's parts for their status over NATS, as an
// operator's program would.
package clientcli

import "github.com/spf13/cobra"

// Commands returns the client commands, for the root command to add.
func Commands() []*cobra.Command {
	return []*cobra.Command{newCallCmd(), newJobsCmd(), newA2ACmd(), newHealthCmd(), newToolsCmd(), newAPIKeyCmd()}
}
