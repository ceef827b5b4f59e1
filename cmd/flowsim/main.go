// Command flowsim plans distributed training by simulation: it models
// clusters and prices plans on them. See `flowsim --help`.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

func newRoot() *cobra.Command {
	var cpuProfile string
	noop := func() error { return nil }
	stopProfile := noop
	cobra.OnFinalize(func() { // after the command, failed or not
		err := stopProfile()
		stopProfile = noop
		if err != nil {
			fmt.Fprintln(os.Stderr, "flowsim: cpu profile:", err)
		}
	})
	root := &cobra.Command{
		Use:           "flowsim",
		Short:         "Simulate distributed training plans on modeled clusters",
		Long:          "flowsim models clusters (devices, links, routes) and evaluates training plans on them with a calibrated cost model.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			stop, err := startCPUProfile(cpuProfile)
			if err == nil {
				stopProfile = stop
			}
			return err
		},
	}
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file (go tool pprof)")
	root.AddCommand(newTopoCmd(), newPlanCmd(), newSimulateCmd(), newSweepCmd(), newReproduceCmd())
	return root
}

// startCPUProfile starts profiling into path (nothing if path is empty)
// and returns what stops it.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flowsim:", err)
		os.Exit(1)
	}
}
