// Command flowsim plans distributed training by simulation: it models
// clusters and prices plans on them. See `flowsim --help`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flowkit/flowkit/internal/cliargs"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "flowsim",
		Short:         "Simulate distributed training plans on modeled clusters",
		Long:          "flowsim models clusters (devices, links, routes) and evaluates training plans on them with a calibrated cost model.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cliargs.CPUProfile(root, "flowsim")
	root.AddCommand(newTopoCmd(), newPlanCmd(), newSimulateCmd(), newSweepCmd(), newReproduceCmd())
	return root
}

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flowsim:", err)
		os.Exit(1)
	}
}
