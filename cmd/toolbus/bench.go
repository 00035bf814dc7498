package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure toolbus against a plain net/http handler, side by side"}
}
