package main

import "github.com/spf13/cobra"

// tracingService is the service name of the spans of cmd:
// "toolbus-ingress" and "toolbus-worker" for those commands, "toolbus" for
// the others (dev runs both parts in one process).
func tracingService(cmd *cobra.Command) string {
	switch cmd.Name() {
	case "ingress", "worker":
		return "toolbus-" + cmd.Name()
	}
	return "toolbus"
}
