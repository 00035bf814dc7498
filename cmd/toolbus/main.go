// Command toolbus runs the parts of a toolbus cluster: the one-process
// development mode, the ingress, workers, and the client and benchmark
// tools. Run `toolbus help` for the commands.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/toolbus/toolbus/internal/clientcli"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		if !errors.Is(err, clientcli.ErrReported) {
			fmt.Fprintln(os.Stderr, "toolbus:", err)
		}
		os.Exit(1)
	}
}
